#!/bin/bash
# Generates /app/repo with a feature branch that is then deleted (its commits stay in the reflog).
set -euo pipefail
export GIT_AUTHOR_NAME="Dev" GIT_AUTHOR_EMAIL="dev@example.com" GIT_COMMITTER_NAME="Dev" GIT_COMMITTER_EMAIL="dev@example.com"
git init -q -b main /app/repo
cd /app/repo
printf '#!/bin/bash\necho "report"\n' > report.sh
git add report.sh && git commit -q -m "report: skeleton"
for i in 1 2 3; do echo "fix $i" >> CHANGELOG; git add CHANGELOG; git commit -q -m "changelog: fix $i"; done
git checkout -q -b feature/totals
echo 'echo "rows: $(wc -l < "${1:-/dev/null}")"' >> report.sh; git commit -q -am "report: count rows"
echo 'echo "total: $(paste -sd+ "${1:-/dev/null}" | bc)"' >> report.sh; git commit -q -am "report: add totals"
echo 'echo "-- end of report --"' >> report.sh; git commit -q -am "report: add totals footer"
git checkout -q main
echo "fix 4" >> CHANGELOG; git commit -q -am "changelog: fix 4"
git branch -q -D feature/totals
