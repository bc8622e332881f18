#!/bin/bash
set -euo pipefail
cd /app/repo
first=$(git rev-list --max-parents=0 main)
git bisect start main "$first" >/dev/null
git bisect run bash -c 'test "$(bash price.sh 200 15)" = 170' > /tmp/bisect.log
grep -o '^[0-9a-f]\{40\} is the first bad commit' /tmp/bisect.log | cut -d' ' -f1 > /app/first_bad.txt
git bisect reset >/dev/null
