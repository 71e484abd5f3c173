#!/bin/sh
# Used inside the images' build stages (docker/api.Dockerfile, docker/worker.Dockerfile):
#
#   build-venv.sh api              # /opt/jobservice: the project, no torch
#   build-venv.sh worker FLAVOUR   # /opt/jobservice: the project + worker extra + torch for FLAVOUR
#
# And, copied into an offline bundle (docker/wheelhouse.sh bundle), on a card host:
#
#   build-venv.sh bundle PREFIX [PYTHON]   # (the bundle's install.sh) a venv in PREFIX; starts nothing
#
# The venv sees the packages PYTHON sees (default python3: the host's torch and what else it has,
# also when PYTHON is itself a venv) and gets the project and the bundle's wheels with --no-index, pip
# choosing the host's version of a package where it will do; then the host's part is checked
# (bundle.py check), ffmpeg and ffprobe are unpacked into PREFIX/bin and the imports are tried.
#
# Wheels come from /wheels (docker/wheelhouse/, filled on the host by docker/wheelhouse.sh) when it
# holds any, with --no-index: no package index is asked. An empty wheelhouse: the index is used.
# PIP_OFFLINE=1 forces the wheelhouse, PIP_OFFLINE=0 the index (wheels still preferred when found).
# torch for cuda always comes from TORCH_INDEX_URL (the wheelhouse holds a CPU build); ascend uses
# the wheelhouse's CPU torch when there is one, and torch-npu from it too (WITH_NPU=1
# docker/wheelhouse.sh), else from the package index.
set -eu
what="$1"
flavour="${2:-cpu}"

if [ "$what" = bundle ]; then
  here="$(cd "$(dirname "$0")" && pwd)"
  prefix="${2:?usage: install.sh PREFIX [PYTHON]}"
  host_python="${3:-${PYTHON:-python3}}"
  started=$(date +%s)
  [ -f "$here/bundle.json" ] || { echo "install: $here is not a bundle (no bundle.json)" >&2; exit 2; }
  pip_in_prefix() { "$prefix/bin/python" -m pip "$@"; }
  if ! "$host_python" -m venv "$prefix" 2>"$prefix.venv-log"; then
    # A Python without ensurepip (Debian's without python3-venv, some uv builds): a venv without
    # pip, which the host's own pip installs into.
    cat "$prefix.venv-log" >&2
    rm -rf "$prefix"
    "$host_python" -m venv --without-pip "$prefix"
    pip_in_prefix() { "$host_python" -m pip --python "$prefix/bin/python" "$@"; }
  fi
  rm -f "$prefix.venv-log"
  # The venv sees exactly the packages the host's Python sees, after its own: a .pth names the
  # host's site folders (a host Python that is itself a venv keeps its packages in its own, which
  # --system-site-packages would miss, and would show its base's, which it may not see).
  site="$("$prefix/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
  "$host_python" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))' \
    >"$site/jobservice-host.pth"
  pip_bundle() { pip_in_prefix install -q --no-cache-dir --no-index --find-links "$here/wheels" "$@"; }
  pip_bundle --no-deps "$(ls "$here"/wheels/jobservice-*.whl)"
  pip_bundle -r "$here/requirements.txt"
  "$prefix/bin/python" "$here/bundle.py" check "$here"
  tar -xJf "$here/tools.tar.xz" -C "$prefix/bin"
  "$prefix/bin/ffmpeg" -hide_banner -version | head -1
  "$prefix/bin/python" -c "import jobservice.http.app, workers.tasks, jobservice.cli.embedded as e; print('redis-server:', e.redis_binary())"
  echo "install: $prefix in $(($(date +%s) - started)) s; nothing started. Next: $prefix/bin/jobservice up"
  exit 0
fi
VENV=/opt/jobservice
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
TORCH_NPU_VERSION="${TORCH_NPU_VERSION:-$TORCH_VERSION}"

have_wheels() { ls /wheels/*.whl >/dev/null 2>&1; }
offline=0
case "${PIP_OFFLINE:-auto}" in
  1) offline=1 ;;
  auto) if have_wheels; then offline=1; fi ;;
esac
pip() {
  # $1 = install|wheel; the rest goes to pip. Offline: --no-index (setuptools for the build too).
  sub="$1"; shift
  if [ "$offline" = 1 ]; then
    "$VENV/bin/python" -m pip "$sub" --no-cache-dir --no-index --find-links /wheels "$@"
  else
    "$VENV/bin/python" -m pip "$sub" --no-cache-dir --find-links /wheels "$@"
  fi
}
echo "build-venv: $what ${flavour} (wheelhouse: $(find /wheels -maxdepth 1 -name "*.whl" | wc -l) wheels, offline=$offline)"

python3 -m venv "$VENV"
# The project's own wheel, built from the source in /src (setuptools from the wheelhouse or index).
pip wheel --no-deps -w /tmp/dist /src
project="$(ls /tmp/dist/jobservice-*.whl)"

if [ "$what" = api ]; then
  pip install "${project}[tracing]"  # traces when JOBSERVICE_OTLP_ENDPOINT is set
  "$VENV/bin/python" -c "import jobservice.http.app, gunicorn, opentelemetry.sdk"
  exit 0
fi

torch_index() {
  if [ -n "${TORCH_INDEX_URL:-}" ]; then echo "$TORCH_INDEX_URL"; return; fi
  case "$flavour" in
    cuda) echo "https://download.pytorch.org/whl/cu128" ;;
    *) echo "https://download.pytorch.org/whl/cpu" ;; # cpu, and ascend (torch-npu brings the NPU side)
  esac
}
case "$flavour" in
  cpu)
    if [ "$offline" = 1 ] || ls /wheels/torch-"$TORCH_VERSION"*.whl >/dev/null 2>&1; then
      pip install "torch==$TORCH_VERSION"
    else
      "$VENV/bin/python" -m pip install --no-cache-dir --index-url "$(torch_index)" "torch==$TORCH_VERSION"
    fi
    ;;
  cuda)
    "$VENV/bin/python" -m pip install --no-cache-dir --index-url "$(torch_index)" "torch==$TORCH_VERSION"
    ;;
  ascend)
    # torch-npu runs on the CPU build of torch: the wheelhouse's when it has one.
    if ls /wheels/torch-"$TORCH_VERSION"*.whl >/dev/null 2>&1 && [ -z "${TORCH_INDEX_URL:-}" ]; then
      pip install "torch==$TORCH_VERSION"
    else
      "$VENV/bin/python" -m pip install --no-cache-dir --index-url "$(torch_index)" "torch==$TORCH_VERSION"
    fi
    if ls /wheels/torch_npu-*.whl >/dev/null 2>&1; then
      pip install "torch-npu==$TORCH_NPU_VERSION"
    else
      "$VENV/bin/python" -m pip install --no-cache-dir "torch-npu==$TORCH_NPU_VERSION"
    fi
    ;;
  *) echo "build-venv: unknown FLAVOUR $flavour (cpu, cuda or ascend)" >&2; exit 2 ;;
esac
pip install "${project}[worker,tracing]"
# torch must still be the one installed above (the worker extra's range admits it). On ascend,
# torch would load torch_npu, which needs CANN's libraries: set_env.sh is only sourced when a
# container starts (entrypoint.sh), so here the backend is left unloaded and only its presence
# checked.
if [ "$flavour" = ascend ]; then export TORCH_DEVICE_BACKEND_AUTOLOAD=0; fi
"$VENV/bin/python" -c "
import importlib.metadata as md
import torch, numpy, cv2, jobservice, workers
print('torch', torch.__version__, 'torch-npu', md.version('torch-npu') if '$flavour' == 'ascend' else '-')
"
