#!/bin/bash
set -euo pipefail
python3 - <<'EOS'
from pathlib import Path
p = Path("/app/stats.py")
s = p.read_text()
s = s.replace("            values.append(float(line))",
              "            line = line.strip()\n            if not line or line.startswith('#'):\n                continue\n            values.append(float(line))")
s = s.replace("    median = values[n // 2]",
              "    median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2")
p.write_text(s)
EOS
