#!/usr/bin/env bash
# The device check in one command: sample with the embedded engine, train one PPO step, print one JSON line
# per (size, backend) (keys in docs/device-check.md). Under 8 minutes on one H200; `--dry-run` runs it on the CPU.
# Usage: tools/device/check.sh [--dry-run] [--backend torch,megatron] [--sizes tiny,1b] [other check.py flags]
#        tools/device/check.sh --ranks 2 [--dry-run]: the megatron step on 2 ranks of one GPU (check_ranks.py)
# Env: T1_DEVICE_CHECK_TIMEOUT_S (default 450 s) bounds the run; T1_WHEELS=DIR installs the wheels in DIR
# into a private folder first (the lent GPU machine reaches no registry); T1_NO_UV=1 uses python3 even where
# uv is installed. Exit: 0 the line was printed, 1 a phase failed, 2 bad arguments or no device, 124 timeout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
limit="${T1_DEVICE_CHECK_TIMEOUT_S:-450}"
if [ -n "${T1_WHEELS:-}" ]; then
  site="${TMPDIR:-/tmp}/t1-device-site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$T1_WHEELS"/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
script="$root/tools/device/check.py"
for arg in "$@"; do
  if [ "$arg" = "--ranks" ]; then script="$root/tools/device/check_ranks.py"; fi
done
if [ -z "${T1_NO_UV:-}" ] && command -v uv >/dev/null 2>&1 && [ -d "$root/.venv" ]; then
  cmd=(uv run --project "$root" --frozen --quiet python "$script")
else
  cmd=(python3 "$script")  # no workspace install: check.py adds packages/*/src itself
fi
export PYTHONUNBUFFERED=1
rc=0
timeout --kill-after=15 "$limit" "${cmd[@]}" "$@" || rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "device check failed: no result within ${limit} s (T1_DEVICE_CHECK_TIMEOUT_S)" >&2
fi
exit "$rc"
