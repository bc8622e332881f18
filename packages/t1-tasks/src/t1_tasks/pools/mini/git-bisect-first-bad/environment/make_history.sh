#!/bin/bash
# Generates /app/repo: 48 commits on main; exactly one commit breaks price.sh (found with git bisect).
set -euo pipefail
export GIT_AUTHOR_NAME="Dev" GIT_AUTHOR_EMAIL="dev@example.com" GIT_COMMITTER_NAME="Dev" GIT_COMMITTER_EMAIL="dev@example.com"
git init -q -b main /app/repo
cd /app/repo
cat > price.sh <<'EOS'
#!/bin/bash
# usage: price.sh AMOUNT PERCENT -> amount after a PERCENT discount, in whole units (rounded down)
amount=$1
percent=$2
echo $(( amount * (100 - percent) / 100 ))
EOS
chmod +x price.sh
echo "# pricing" > README.md
git add -A
n=0
commit() { n=$((n + 1)); GIT_AUTHOR_DATE="2026-01-01T00:00:00Z +$n hours" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z +$n hours" git commit -q -m "$1"; }
commit "initial pricing script"
for i in $(seq 1 47); do
  case $((i % 3)) in
    0) echo "- note $i" >> README.md; git add README.md; msg="docs: note $i" ;;
    1) echo "rate_$i=$((i * 7 % 13))" >> rates.conf; git add rates.conf; msg="rates: add rate $i" ;;
    2) echo "# change $i" >> price.sh; git add price.sh; msg="price: tidy comment $i" ;;
  esac
  if [ "$i" -eq 29 ]; then
    # the regression: discounts of 10 % or more are applied twice
    sed -i 's|^echo \$(( amount \* (100 - percent) / 100 ))$|if [ "$percent" -ge 10 ]; then amount=$(( amount * (100 - percent) / 100 )); fi\necho $(( amount * (100 - percent) / 100 ))|' price.sh
    git add price.sh
    msg="price: handle large discounts"
  fi
  commit "$msg"
done
