#!/bin/bash
# Creates /app/data with files of known sizes.
set -euo pipefail
mkdir -p "$(dirname "/app/data/logs/app.log")" && head -c 1500000 /dev/zero > "/app/data/logs/app.log"
mkdir -p "$(dirname "/app/data/logs/app.log.1")" && head -c 3200000 /dev/zero > "/app/data/logs/app.log.1"
mkdir -p "$(dirname "/app/data/logs/error.log")" && head -c 40000 /dev/zero > "/app/data/logs/error.log"
mkdir -p "$(dirname "/app/data/cache/blob-a")" && head -c 1048576 /dev/zero > "/app/data/cache/blob-a"
mkdir -p "$(dirname "/app/data/cache/blob-b")" && head -c 1048577 /dev/zero > "/app/data/cache/blob-b"
mkdir -p "$(dirname "/app/data/cache/small")" && head -c 9000 /dev/zero > "/app/data/cache/small"
mkdir -p "$(dirname "/app/data/home/alice/video.mp4")" && head -c 2400000 /dev/zero > "/app/data/home/alice/video.mp4"
mkdir -p "$(dirname "/app/data/home/alice/notes.txt")" && head -c 2000 /dev/zero > "/app/data/home/alice/notes.txt"
mkdir -p "$(dirname "/app/data/home/bob/core.dump")" && head -c 4100000 /dev/zero > "/app/data/home/bob/core.dump"
mkdir -p "$(dirname "/app/data/home/bob/.hidden big")" && head -c 1200000 /dev/zero > "/app/data/home/bob/.hidden big"
mkdir -p "$(dirname "/app/data/tmp/x")" && head -c 100 /dev/zero > "/app/data/tmp/x"
