#!/bin/bash
set -euo pipefail
find /app/data -type f -size +1048576c -printf '%s\t%p\n' | sort -k1,1nr | cut -f2- > /app/large_files.txt
