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
