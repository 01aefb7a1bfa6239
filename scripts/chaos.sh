#!/usr/bin/env bash
# The full chaos run (issue #19 item 6): builds the daemon and tests/chaos.rs,
# then SIGKILLs the real daemon at seeded random points of the turn pipeline
# and of approved work for SILAS_CHAOS_ITERATIONS rounds (default 50),
# checking after every restart. Prints the summary line: iterations,
# violations (must be 0) and the seed (SILAS_CHAOS_SEED=<seed> replays it).
#
#   scripts/chaos.sh                 # 50 rounds, debug build (shares CI's cache)
#   scripts/chaos.sh --release       # the same over target/release/silas
#   SILAS_CHAOS_ITERATIONS=200 SILAS_CHAOS_SEED=42 scripts/chaos.sh
#
# CI runs the short form (6 rounds) inside `cargo nextest run --workspace`.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
export SILAS_CHAOS_ITERATIONS="${SILAS_CHAOS_ITERATIONS:-50}"
profile=()
if [ "${1:-}" = "--release" ]; then profile=(--release); fi
cargo build "${profile[@]}" -p silas --bin silas --test chaos
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo nextest run "${profile[@]}" -p silas --test chaos --no-capture \
  -E 'test(sigkill_at_random_points)' >"$log" 2>&1 || status=$?
# Violations (if any) and the summary.
grep -E '^chaos: ' "$log" | sort -u || true
if [ "$status" -ne 0 ]; then
  tail -n 40 "$log"
  echo "CHAOS FAILED (exit $status)"
fi
exit "$status"
