#!/bin/bash
# usage: backup.sh SRC_DIR DEST_DIR
# Writes DEST_DIR/backup.tar.gz holding every regular file under SRC_DIR (paths relative to SRC_DIR),
# except files whose name ends in .tmp, then prints how many files it saved.
src=$1
dest=$2
mkdir -p $dest
files=$(cd $src && find . -type f ! -name *.tmp)
tar -czf $dest/backup.tar.gz -C $src $files
echo "saved $(echo $files | wc -w) files"
