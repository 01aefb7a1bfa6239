#!/usr/bin/env python3
"""Generate golden vectors for Silas's canonical JSON module.

Independent reference: the canonical form is exactly
    json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
encoded as UTF-8 (spec §3.1, §3.3, §3.6, §3.11). Each vector stores the object
in a deliberately non-canonical rendering (`input`: insertion-ordered, indented)
and the reference bytes (`canonical`, plus its SHA-256). The Rust test parses
`input`, canonicalises it and must match byte for byte.

Run: python3 tests/golden/gen_canonical.py > tests/golden/canonical_vectors.json
"""
import hashlib
import json

VECTORS = [
    ("empty_object", {}),
    ("empty_list", []),
    ("empty_lists_in_object", {"tasks": [], "depends_on": [], "skills": []}),
    ("nested_objects_sorted", {"z": {"b": 2, "a": 1, "c": {"y": None, "x": True}}, "a": [3, 2, 1]}),
    ("key_order_is_codepoint", {"b": 1, "B": 2, "a": 3, "_": 4, "é": 5, "日": 6, "🙂": 7, "aa": 8, "a\u0000": 9}),
    ("floats", {"two": 2.0, "tenth": 0.1, "neg": -2.5, "zero": 0.0, "negzero": -0.0,
                "small": 1e-05, "smaller": 1.5e-07, "edge_small": 0.0001, "big": 1e16,
                "bigger": 1.5e16, "below_big": 9999999999999998.0, "huge": 1e100,
                "third": 1 / 3, "sum": 0.1 + 0.2, "cost": 2.00, "pct": 0.45, "max": 1.7976931348623157e308,
                "tiny": 5e-324}),
    ("integers", {"zero": 0, "neg": -1, "big": 18446744073709551615, "min": -9223372036854775808, "budget": 200000}),
    ("literals", [True, False, None]),
    ("non_ascii_text", {"text": "Grüße aus Wien — 日本語 — emoji 🙂🚀 — Ελληνικά — עברית"}),
    ("escapes", {"s": "quote\" backslash\\ slash/ nl\n cr\r tab\t bs\b ff\f nul\u0000 us\u001f del\u007f ls\u2028 ps\u2029"}),
    ("unicode_keys_and_values", {"ключ": "значение", "clé": ["é", "e\u0301"]}),
    ("deep_nesting", {"a": [{"b": [{"c": [{"d": []}]}]}]}),
    ("signed_message_payload", {"text": "Deploy the fix ✅", "timestamp": "2026-01-15T10:00:00Z", "nonce": "n-7f3a"}),
    ("approval_token_payload", {
        "plan_hash": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "work_item_id": "wi-1", "scope": "full_plan", "verdict": "approved", "nonce": "tok-nonce",
        "approval_strength": "tap", "issued_at": "2026-01-15T10:00:00Z",
        "expires_at": "2026-01-15T10:30:00.250000Z", "max_executions": 1,
        "conditions": {"spawn_policy_hash": "abc", "note": "ok"}}),
    ("batch_projection", {"goal_id": "g-1", "action": "archive", "item_ids": ["m3", "m1", "m2"], "count": 3}),
    ("budget_projection", {"max_tokens": 200000, "max_cost_usd": 2.0, "max_wall_time_seconds": 1800,
                           "max_attempts": 5, "max_planner_calls": 3}),
    ("spawn_policy_shape", {"failure_context_template": "Fix: $failed_checks", "skills": ["coding"],
                            "gates": ['{"name":"g"}'], "verify": [], "escalation_config": {}}),
]


def main():
    out = []
    for name, obj in VECTORS:
        canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        out.append({
            "name": name,
            "input": json.dumps(obj, indent=2, ensure_ascii=True),
            "canonical": canonical,
            "sha256": hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
        })
    print(json.dumps(out, indent=1, ensure_ascii=True))


if __name__ == "__main__":
    main()
