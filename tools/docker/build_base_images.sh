#!/usr/bin/env bash
# Build T1's local Docker base images from the Debian mirror (no image registry is needed or reached).
#
# Each image is a debootstrap minbase of one Debian suite plus CPython and the tools the bundled tasks use,
# imported with `docker import` as t1-local/debian:<suite>. Recipes map the bases that tasks name
# (python:3.13-slim-bookworm, ubuntu:24.04, ...) onto these images with sandbox.images (recipes/tiny-docker.yaml).
# Idempotent: a suite whose image already exists is skipped. Usage: tools/docker/build_base_images.sh [suite...]
# (default: bookworm trixie). Needs root, debootstrap and a Docker daemon that answers.
set -euo pipefail

MIRROR=${T1_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# CPython (bookworm: 3.11, trixie: 3.13) with `python` and pip, git, ps/kill, and what the mini pool's tasks
# call; util-linux, tar and gzip are in minbase already.
PACKAGES=python3,python-is-python3,python3-pip,git,procps,ca-certificates,bc,file,less,xz-utils,curl
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie)

for suite in "${suites[@]}"; do
  image="t1-local/debian:${suite}"
  if docker image inspect "$image" >/dev/null 2>&1; then
    echo "build_base_images: $image exists, skipped"
    continue
  fi
  start=$(date +%s)
  root=$(mktemp -d "/var/tmp/t1-debootstrap-${suite}-XXXXXX")
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase --include="$PACKAGES" "$suite" "$root" "$MIRROR" >"$root.log" 2>&1 || {
    tail -20 "$root.log" >&2
    echo "build_base_images: debootstrap $suite failed (log: $root.log)" >&2
    exit 1
  }
  # smaller images, and no stale apt lists baked in (a task's own `apt-get update` would fetch fresh ones)
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/locale/*
  chmod 0755 "$root"  # mktemp made it 0700: it becomes the image's /, which every user must traverse
  python=$(chroot "$root" python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
  tar -C "$root" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["bash"]' \
    --change "LABEL org.t1.base=debian:${suite} org.t1.python=${python} org.t1.built-by=debootstrap-minbase" \
    - "$image" >/dev/null
  rm -rf "$root" "$root.log"
  trap - EXIT
  echo "build_base_images: $image built in $(($(date +%s) - start)) s (Debian $suite minbase, CPython $python)"
done
