#!/usr/bin/env bash
# The device check: the service on one card through real workers, as one JSON document (the last
# line printed, and --out/device-check.json). What it runs and measures: scripts/bench_lib/device.py
# (its docstring) and docs/benchmarks.md ("On a card"). With --bundle, it first installs the
# offline bundle (docker/wheelhouse.sh bundle) into a fresh prefix with the host's python3 (the
# host keeps its own torch) and runs from there; without, it runs with the repo's .venv.
#
#   scripts/verify_device.sh [--bundle dist/bundle] [--device cuda:0|npu:0|cpu] [--runs 2]
#                            [--rounds 20] [--repeats 3] [--deadline-s 270] [--out DIR] [--keep]
#
# On a lent card machine: timeout 360 scripts/verify_device.sh --bundle dist/bundle --out "$OUT".
# It has not yet run on a card: its time there is not known (on this project's 2-core CPU machine,
# --device cpu --rounds 3 --repeats 2 took 2.5 minutes from the bundle). It keeps to
# --deadline-s (the install included) by running fewer nightly rounds, and writes its document
# after each part, so that a run stopped by the timeout still leaves what it measured.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
args=()
bundle=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
cd "$ROOT"
if [ -n "$bundle" ]; then
  prefix="$(mktemp -d "${TMPDIR:-/tmp}/jobservice-check.XXXXXX")"
  started=$(date +%s)
  sh "$bundle/install.sh" "$prefix" "${PYTHON:-python3}"
  args+=(--install-s "$(($(date +%s) - started))")
  PY="$prefix/bin/python"
  export PATH="$prefix/bin:$PATH"
fi
exec "$PY" scripts/bench_lib/device.py "${args[@]}"
