#!/usr/bin/env bash
# Absolute figures on a device through a real worker: the reference models and the diffusers back
# end (a tiny random Wan2.1 pipeline built locally: no network), cold and warm, as one JSON line
# (the last line). Needs the repo's .venv with the worker and diffusers extras, ffmpeg and
# redis-server; takes about a minute on an H200, a few on a CPU.
#
#   scripts/verify_device.sh [--device cuda:0|npu:0|cpu] [--runs 2] [--keep]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
cd "$ROOT"
exec "$PY" scripts/bench_lib/device.py "$@"
