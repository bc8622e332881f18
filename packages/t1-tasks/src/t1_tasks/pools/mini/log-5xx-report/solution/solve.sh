#!/bin/bash
set -euo pipefail
cd /app
awk '{ s = $9; if (s >= 500 && s <= 599) { p = $7; sub(/\?.*/, "", p); n[p]++ } } END { for (p in n) print n[p], p }' access.log \
  | LC_ALL=C sort -k1,1nr -k2,2 > report.txt
