#!/bin/bash
# Verifier: one pytest test per assertion, per-test CTRF report, and ALWAYS a binary reward.json (trap on EXIT).
# Needs no network: python3 with pytest and pytest-json-ctrf comes from the verifier toolchain on PATH.
mkdir -p /logs/verifier
rc=1
trap 'if [ "$rc" -eq 0 ]; then r=1.0; else r=0.0; fi; printf "{\"reward\": %s}\n" "$r" > /logs/verifier/reward.json' EXIT
export PYTHONDONTWRITEBYTECODE=1
python3 -m pytest -p no:cacheprovider --rootdir=/tests --ctrf /logs/verifier/ctrf.json -rA /tests/test_outputs.py
rc=$?
exit "$rc"
