#!/usr/bin/env bash
# Nightly fuzzing smoke run (issue #19 item 7): each cargo-fuzz target in
# fuzz/ for FUZZ_SECONDS (default 30). cargo-fuzz needs the nightly
# toolchain; without it this says so loudly and exits 0 — the corpora still
# run on stable in every CI run (tests/fuzz_corpus.rs). A crash found here
# is saved by libFuzzer under fuzz/artifacts/<target>/: copy it into
# fuzz/corpus/<target>/ so it becomes a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${FUZZ_SECONDS:-30}"
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "=================================================================="
  echo "FUZZ SMOKE SKIPPED: no nightly toolchain (cargo-fuzz needs it)."
  echo "The corpora still ran on stable: tests/fuzz_corpus.rs."
  echo "=================================================================="
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  cargo +nightly install cargo-fuzz --locked
fi
for target in plan_parser client_frame skill_manifest config_yaml; do
  echo "--- fuzzing $target for ${SECONDS_EACH}s"
  cargo +nightly fuzz run "$target" "fuzz/corpus/$target" -- \
    -max_total_time="$SECONDS_EACH" -max_len=65536 -timeout=5
done
