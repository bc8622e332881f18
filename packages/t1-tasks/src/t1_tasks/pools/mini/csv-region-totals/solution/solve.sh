#!/bin/bash
set -euo pipefail
cd /app
{ echo "region,revenue"
  awk -F, 'NR > 1 { t[$2] += $4 * $5 } END { for (r in t) printf "%s,%.2f\n", r, t[r] }' sales.csv | sort -t, -k2,2 -g -r
} > region_totals.csv
