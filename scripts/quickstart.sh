#!/usr/bin/env bash
# One command from a fresh machine to real jobs: sets up .venv, makes sure ffmpeg is there, starts
# the embedded stack (jobservice up: its own Redis, SQLite and object store under ./var, the API on
# http://127.0.0.1:8000, one CPU worker), submits one audio2video and one text2video job over HTTP,
# prints how they went, and keeps serving until Ctrl-C. With --once it exits after the sample jobs,
# non-zero if either failed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"

ONCE=0
PORT="${JOBSERVICE_API_PORT:-8000}"
for arg in "$@"; do
  case "$arg" in
    --once) ONCE=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

cd "$ROOT"
ensure_ffmpeg
ensure_venv worker,embedded
JS="$VENV/bin/jobservice"
URL="http://127.0.0.1:$PORT"
OUT="$ROOT/var/quickstart"
mkdir -p "$OUT"

say "starting jobservice up (logs: var/logs/)"
"$JS" up --port "$PORT" &
UP_PID=$!
stop() { kill -INT "$UP_PID" 2>/dev/null || true; wait "$UP_PID" 2>/dev/null || true; }
trap 'stop; exit 130' INT TERM

healthy() { "$VENV/bin/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)" "$URL/healthz" >/dev/null 2>&1; }
up=0
for _ in $(seq 1 120); do
  if healthy; then up=1; break; fi
  kill -0 "$UP_PID" 2>/dev/null || { echo "jobservice up exited; see var/logs/" >&2; exit 1; }
  sleep 0.5
done
if [ "$up" != 1 ]; then
  echo "the API did not answer on $URL within 60 s; see var/logs/" >&2
  stop
  exit 1
fi

status=0
say "audio2video: samples/portrait.png + samples/speech.wav -> reference-talking-head"
"$JS" submit --url "$URL" --task audio2video --image samples/portrait.png --audio samples/speech.wav \
  --output "$OUT/audio2video.mp4" || status=1

say "text2video: a prompt -> reference-t2v"
"$JS" submit --url "$URL" --task text2video --prompt "a paper boat drifting across a blue pond at sunset" \
  -p num_frames=49 -p seed=7 --output "$OUT/text2video.mp4" || status=1

if [ "$status" = 0 ]; then
  say "both sample jobs succeeded; videos in var/quickstart/, everything else under var/"
else
  say "a sample job failed (see above and var/logs/)"
fi

if [ "$ONCE" = 1 ]; then
  stop
  exit "$status"
fi
say "jobservice keeps serving on $URL (try: $JS submit --help). Ctrl-C stops it."
wait "$UP_PID"
