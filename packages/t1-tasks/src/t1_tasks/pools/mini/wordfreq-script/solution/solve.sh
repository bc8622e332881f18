#!/bin/bash
set -euo pipefail
cat > /app/wordfreq <<'EOS'
#!/bin/bash
n=${1:-10}
tr -cs 'A-Za-z' '\n' | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2,2 | head -n "$n" | awk '{ print $1, $2 }'
EOS
chmod +x /app/wordfreq
