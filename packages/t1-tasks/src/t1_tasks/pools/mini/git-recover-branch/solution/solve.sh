#!/bin/bash
set -euo pipefail
cd /app/repo
sha=$(git log -g --format='%H %s' HEAD | awk '$2 == "report:" && $0 ~ /add totals footer$/ { print $1; exit }')
git branch feature/totals "$sha"
