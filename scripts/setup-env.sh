#!/usr/bin/env bash
# Shared set-up for quickstart.sh and test.sh: a .venv in the repository root with the project,
# and ffmpeg on the PATH. Safe to run again; it only does what is missing. Source it, don't run it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

apt_install() {
  # Install Debian packages when we are root; otherwise say what is missing.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing $* with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "$@" >/dev/null
  else
    echo "missing: $* (install them, e.g. sudo apt-get install -y $*)" >&2
    return 1
  fi
}

ensure_ffmpeg() {
  command -v ffmpeg >/dev/null && command -v ffprobe >/dev/null || apt_install ffmpeg
}

ensure_venv() {
  local extras="${1:-worker}"
  local stamp="$VENV/.jobservice-$extras"
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    if ! "$PY" -m venv "$VENV" 2>/dev/null; then
      # Debian's own python3 ships venv's pip bootstrap separately (python3-venv).
      rm -rf "$VENV"
      apt_install python3-venv
      "$PY" -m venv "$VENV"
    fi
  fi
  if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
    say "installing jobservice[$extras] into .venv (first time: a minute or two)"
    local log="$ROOT/var/pip-install.log"
    mkdir -p "$ROOT/var"
    : >"$log"
    # torch first, pinned to the CPU wheel this machine carries, so no multi-GB CUDA build is pulled.
    if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
      "$VENV/bin/python" -m pip install "torch==${JOBSERVICE_TORCH_VERSION:-2.13.0}" >>"$log" 2>&1 \
        || { tail -20 "$log" >&2; echo "installing torch failed; full log: $log" >&2; return 1; }
    fi
    "$VENV/bin/python" -m pip install -e "$ROOT[$extras]" >>"$log" 2>&1 \
      || { tail -20 "$log" >&2; echo "installing jobservice failed; full log: $log" >&2; return 1; }
    "$VENV/bin/python" -c "import jobservice, torch, numpy, cv2" >/dev/null
    touch "$stamp"
  fi
}
