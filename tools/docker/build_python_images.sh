#!/usr/bin/env bash
# Build T1's local stand-ins for the official python:X.Y-slim-<suite> images, offline, from images already here.
#
# Each image t1-local/python:X.Y-slim-<suite> is t1-local/debian:<suite> (tools/docker/build_base_images.sh)
# made to look like the python image where it matters to a task's Dockerfile and scripts:
#   - Debian's own Python is removed (python3, python-is-python3, python3-pip...): no /usr/bin/python or
#     /usr/bin/python3 (a task's `ln -s /usr/local/bin/python3 /usr/bin/python` works) and no PEP 668
#     EXTERNALLY-MANAGED marker (`pip install` works, as in the python images);
#   - CPython X.Y from this host (uv's or pyenv's build, found by `uv python find` or under ~/.pyenv) is
#     installed under /usr/local: /usr/local/bin/pythonX.Y, python3, python, and pip, pip3, pipX.Y from the
#     interpreter's own ensurepip (no download); the standard library without its tests, as the python images;
#   - PATH, LANG and PYTHON_VERSION as the python images set them, and CMD ["python3"].
# What still differs is in the image's label org.t1.differs, which T1 prints when it uses the stand-in.
# Nothing is downloaded: the build runs with --network none. Idempotent: an existing image is skipped.
# Usage: tools/docker/build_python_images.sh [X.Y-suite ...] (default: 3.13-bookworm 3.12-bookworm
# 3.11-bookworm 3.10-bookworm 3.13-trixie). Needs a Docker daemon that answers and the CPythons on this host.
set -euo pipefail

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(3.13-bookworm 3.12-bookworm 3.11-bookworm 3.10-bookworm 3.13-trixie)

find_python() {  # the prefix of a full CPython X.Y on this host (bin/pythonX.Y and lib/pythonX.Y/os.py)
  local v=$1 exe prefix
  for exe in $(uv python find --system --no-project "$v" 2>/dev/null) \
    $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v" 2>/dev/null | sort -V -r) \
    $(ls -d "$HOME"/.local/share/uv/python/cpython-"$v".*/bin/python"$v" 2>/dev/null | sort -V -r); do
    prefix=$("$exe" -I -c 'import sys; print(sys.base_prefix)' 2>/dev/null) || continue
    if [ -f "$prefix/lib/python$v/os.py" ] && [ -x "$prefix/bin/python$v" ] && [ "$prefix" != /usr ]; then
      echo "$prefix"
      return 0
    fi
  done
  return 1
}

for item in "${wanted[@]}"; do
  v=${item%%-*}
  suite=${item#*-}
  image="t1-local/python:${v}-slim-${suite}"
  if docker image inspect "$image" >/dev/null 2>&1; then
    echo "build_python_images: $image exists, skipped"
    continue
  fi
  base="t1-local/debian:${suite}"
  if ! docker image inspect "$base" >/dev/null 2>&1; then
    echo "build_python_images: $base is missing; build it first: tools/docker/build_base_images.sh $suite" >&2
    exit 1
  fi
  if ! prefix=$(find_python "$v"); then
    echo "build_python_images: no CPython $v on this host (uv python find $v, ~/.pyenv/versions/$v.*);" \
      "install one (uv python install $v, or pyenv install $v) while a network is available" >&2
    exit 1
  fi
  full=$("$prefix/bin/python$v" -I -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
  start=$(date +%s)
  ctx=$(mktemp -d "/var/tmp/t1-python-${v}-${suite}-XXXXXX")
  trap 'rm -rf "$ctx"' EXIT
  mkdir -p "$ctx/local/bin" "$ctx/local/lib"
  cp -a "$prefix/bin/python$v" "$ctx/local/bin/"
  cp -a "$prefix"/lib/libpython"$v"*.so* "$ctx/local/lib/" 2>/dev/null || true
  # the standard library as the python images ship it: no tests, no bytecode, no third-party site-packages
  tar -C "$prefix/lib" --exclude="python$v/test" --exclude="python$v/idlelib/idle_test" \
    --exclude='__pycache__' --exclude="python$v/site-packages/*" --exclude="python$v/config-*/*.a" \
    -cf - "python$v" | tar -C "$ctx/local/lib" -xf -
  [ -d "$prefix/include/python$v" ] && mkdir -p "$ctx/local/include" && cp -a "$prefix/include/python$v" "$ctx/local/include/"
  differs="CPython ${full} built for this host (${prefix}), not the python image's own build; Debian ${suite} minbase with git, curl, procps, bc, file, less, xz-utils (the python image has fewer tools)"
  cat >"$ctx/Dockerfile" <<EOF
FROM ${base}
RUN apt-get purge -y \$(dpkg-query -W -f '\${Package}\n' | grep -E '^(python|libpython)') >/dev/null \
 && rm -rf /usr/lib/python3* /usr/local/lib/python3*
COPY local/ /usr/local/
RUN set -e; ldconfig; \
 cd /usr/local/bin && ln -sf python${v} python3 && ln -sf python3 python; \
 missing=\$(ldd /usr/local/bin/python${v} /usr/local/lib/python${v}/lib-dynload/*.so 2>/dev/null | grep 'not found' | sort -u || true); \
 if [ -n "\$missing" ]; then echo "CPython ${v} needs libraries this image lacks:"; echo "\$missing"; fi; \
 python3 -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, readline' ; \
 python3 -m ensurepip --default-pip >/dev/null; \
 python3 -m pip --version; \
 test ! -e /usr/bin/python && test ! -e /usr/bin/python3; \
 ! ls /usr/lib/python3*/EXTERNALLY-MANAGED /usr/local/lib/python${v}/EXTERNALLY-MANAGED 2>/dev/null
ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 PYTHON_VERSION=${full}
LABEL org.t1.base=python:${v}-slim-${suite} org.t1.python=${full} org.t1.built-by=build_python_images \
 org.t1.differs="${differs}"
CMD ["python3"]
EOF
  docker build --network none -t "$image" "$ctx" >"$ctx.log" 2>&1 || {
    tail -30 "$ctx.log" >&2
    echo "build_python_images: building $image failed (log: $ctx.log)" >&2
    exit 1
  }
  rm -rf "$ctx" "$ctx.log"
  trap - EXIT
  echo "build_python_images: $image built in $(($(date +%s) - start)) s (Debian $suite, CPython $full under /usr/local)"
done
