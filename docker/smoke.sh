#!/usr/bin/env bash
# End-to-end check of the images and docker/compose.yaml on this machine:
#
#   ./docker/smoke.sh [--keep] [--rebuild]
#
# 1. builds what is missing or stale: the Debian base (docker/base-image.sh: pulled, or made with
#    debootstrap where no registry answers), the wheelhouse (docker/wheelhouse.sh), the API and CPU
#    worker images, and stand-ins for PostgreSQL, Redis, S3 (moto) and Flower built from Debian
#    packages (docker/local/services.Dockerfile; SMOKE_THIRD_PARTY=registry uses the compose
#    file's own images: postgres, redis, minio, flower);
# 2. starts the stack (project `jobsmoke`), waits for /readyz, creates an admin key with
#    `jobservice keys create` in the api container;
# 3. runs one audio2video job (samples/portrait.png + samples/speech.wav, reference-talking-head)
#    and one text2video job through the published API port, and fetches both videos (302 to S3);
# 4. scales the workers to 2, SIGKILLs the worker container running a job mid-generation, and
#    checks the job succeeds exactly once, on the other worker (its /events);
# 5. restarts Redis and runs one more job;
# 6. tears everything down (containers, networks, volumes) unless --keep.
#
# The last line printed is one JSON object with the timings and outcomes; exit 0 when all passed.
# Needs: docker with BuildKit (docker buildx, or a 20.x/22.x client with DOCKER_BUILDKIT=1),
# `docker compose` or docker-compose 1.29, python3 and curl on the host, root for debootstrap.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KEEP=0
REBUILD=0
for arg in "$@"; do
  case "$arg" in
    --keep) KEEP=1 ;;
    --rebuild) REBUILD=1 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

T0=$(date +%s.%N)
now() { date +%s.%N; }
since() { python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$1" "$(now)"; }
say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
declare -A R=() # results for the JSON line
STEP="setup"

finish() {
  local rc=$?
  set +e
  R[ok]=$([ "$rc" = 0 ] && echo true || echo false)
  [ "$rc" = 0 ] || R[failed_step]="\"$STEP\""
  if [ -n "${COMPOSE_CMD:-}" ]; then
    if [ "$rc" != 0 ]; then
      say "failed at: $STEP; last log lines"
      compose logs --tail 30 >&2 2>&1
    fi
    if [ "$KEEP" = 1 ]; then
      say "--keep: the stack stays up (project $PROJECT; API $API_URL; key in SMOKE_API_KEY printed above)"
    else
      local t
      t=$(now)
      compose --profile flower down -v --remove-orphans --timeout 20 >/dev/null 2>&1
      R[teardown_s]=$(since "$t")
      local left
      left=$( (docker ps -aq --filter "label=com.docker.compose.project=$PROJECT"
        docker network ls -q --filter "label=com.docker.compose.project=$PROJECT"
        docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT") | wc -l)
      R[left_behind]=$left
      if [ "$left" != 0 ]; then R[ok]=false; rc=1; fi
    fi
  fi
  R[total_s]=$(since "$T0")
  local json="{" sep=""
  for k in $(printf '%s\n' "${!R[@]}" | sort); do
    json+="$sep\"$k\": ${R[$k]}"
    sep=", "
  done
  echo "$json}"
  exit "$rc"
}
trap finish EXIT

# --- tools -------------------------------------------------------------------------------------
STEP="tools"
# A docker client whose `build` uses BuildKit (only the chosen flavour's stages are built).
if docker buildx version >/dev/null 2>&1; then
  BUILD=(docker build)
else
  BUILD=()
  for cand in docker /usr/bin/docker; do
    major=$("$cand" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1) || continue
    if [ -n "$major" ] && [ "$major" -lt 23 ]; then BUILD=(env DOCKER_BUILDKIT=1 "$cand" build); break; fi
  done
  [ ${#BUILD[@]} -gt 0 ] || { echo "no BuildKit: install docker buildx" >&2; exit 1; }
fi
if docker compose version >/dev/null 2>&1; then
  COMPOSE_BIN=(docker compose)
elif command -v docker-compose >/dev/null; then
  COMPOSE_BIN=(docker-compose)
else
  echo "no docker compose / docker-compose" >&2
  exit 1
fi

# --- images ------------------------------------------------------------------------------------
STEP="base image"
t=$(now)
if [ -z "${BASE_IMAGE:-}" ]; then
  if docker image inspect debian:bookworm-slim >/dev/null 2>&1 \
    || timeout 60 docker pull -q debian:bookworm-slim >/dev/null 2>&1; then
    BASE_IMAGE=debian:bookworm-slim
  else
    BASE_IMAGE=jobservice/debian:bookworm
  fi
fi
export BASE_IMAGE
BASE_IMAGE_NO_PULL=1 docker/base-image.sh "$BASE_IMAGE" >/dev/null
R[base_image_s]=$(since "$t")

STEP="wheelhouse"
t=$(now)
stamp=docker/wheelhouse/.stamp
if [ "${SMOKE_WHEELHOUSE:-1}" = 1 ] && { [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] \
  || [ docker/wheelhouse.sh -nt "$stamp" ]; }; then
  docker/wheelhouse.sh
  touch "$stamp"
fi
R[wheelhouse_s]=$(since "$t")

# A hash of everything an image is built from: a stale image is rebuilt (BuildKit's cache keeps
# that quick when little changed).
source_hash() {
  { find jobservice workers -name '*.py' -o -name '*.html' -o -name '*.css' -o -name '*.js' \
      -o -name '*.mako' -o -name 'py.typed' | grep -v __pycache__ | sort | xargs sha256sum
    sha256sum pyproject.toml README.md docker/*.Dockerfile docker/local/* docker/build-venv.sh \
      docker/entrypoint.sh docker/healthcheck.py
    ls docker/wheelhouse; echo "$BASE_IMAGE"; } | sha256sum | cut -c1-16
}
HASH=$(source_hash)
VERSION=$(python3 -c "import tomllib; print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])" 2>/dev/null || echo 0.0.0)
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
build() { # tag dockerfile [args...]
  local tag="$1" file="$2"
  shift 2
  local have
  have=$(docker image inspect -f '{{index .Config.Labels "io.jobservice.source-hash"}}' "$tag" 2>/dev/null || true)
  if [ "$REBUILD" = 0 ] && [ "$have" = "$HASH" ]; then return 0; fi
  say "building $tag"
  local log
  log=$(mktemp)
  if ! "${BUILD[@]}" -f "$file" -t "$tag" --label "io.jobservice.source-hash=$HASH" \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "VERSION=$VERSION" --build-arg "COMMIT=$COMMIT" \
    "$@" . >"$log" 2>&1; then
    tail -40 "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
  R[built]="${R[built]:-0}"
  R[built]=$((R[built] + 1))
}
STEP="build images"
t=$(now)
export API_IMAGE="jobservice-api:smoke" WORKER_IMAGE="jobservice-worker:smoke-cpu"
build "$API_IMAGE" docker/api.Dockerfile
build "$WORKER_IMAGE" docker/worker.Dockerfile --build-arg FLAVOUR=cpu
if [ "${SMOKE_THIRD_PARTY:-local}" = local ]; then
  for target in postgres redis moto flower; do
    build "jobservice-local/$target:smoke" docker/local/services.Dockerfile --target "$target"
  done
  export POSTGRES_IMAGE=jobservice-local/postgres:smoke REDIS_IMAGE=jobservice-local/redis:smoke \
    S3_IMAGE=jobservice-local/moto:smoke FLOWER_IMAGE=jobservice-local/flower:smoke
fi
R[build_s]=$(since "$t")

# --- the stack ---------------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PROJECT="${SMOKE_PROJECT:-jobsmoke}"
API_PORT=$(free_port)
S3_PORT=$(free_port)
export API_PUBLISH="127.0.0.1:$API_PORT" S3_PUBLISH="127.0.0.1:$S3_PORT"
export S3_PUBLIC_ENDPOINT_URL="http://127.0.0.1:$S3_PORT"
JOBSERVICE_SECRET_KEY="$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
export JOBSERVICE_SECRET_KEY
export JOBSERVICE_ALLOWED_HOSTS='["127.0.0.1", "localhost"]'
# Short leases: a killed worker's job is taken over within seconds.
export JOBSERVICE_HEARTBEAT_SECONDS=2 JOBSERVICE_LEASE_SECONDS=8 JOBSERVICE_REAP_INTERVAL_SECONDS=2
export JOBSERVICE_TORCH_THREADS=1 JOBSERVICE_API_WORKERS=2 JOBSERVICE_MIN_FREE_MB=64
API_URL="http://127.0.0.1:$API_PORT"
COMPOSE_CMD=1
compose() { "${COMPOSE_BIN[@]}" -p "$PROJECT" -f docker/compose.yaml "$@"; }
api() { python3 docker/smoke_api.py "$@"; }
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])$1)"; }

STEP="up"
t=$(now)
compose --profile flower down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
compose up -d --no-build --scale worker=1 >&2
api ready "$API_URL" --timeout 180 >/dev/null
R[up_to_ready_s]=$(since "$t")

STEP="admin key"
KEY_JSON=$(compose exec -T api jobservice keys create --name smoke --role admin --json)
SMOKE_API_KEY=$(printf '%s' "$KEY_JSON" | python3 -c "import json,sys; t=sys.stdin.read(); print(json.loads(t[t.index('{'):])['secret'])")
export SMOKE_API_KEY
[ "$KEEP" = 1 ] && echo "SMOKE_API_KEY=$SMOKE_API_KEY" >&2
code=$(curl -s -o /dev/null -w '%{http_code}' "$API_URL/jobs")
R[no_key_status]=$code
[ "$code" = 401 ] || { echo "GET /jobs without a key answered $code, not 401" >&2; exit 1; }
api workers "$API_URL" 1 --timeout 120 >/dev/null

STEP="audio2video"
t=$(now)
A2V=$(api a2v "$API_URL" samples/portrait.png samples/speech.wav | field '["id"]')
api finish "$API_URL" "$A2V" --timeout 300 >/tmp/smoke-a2v.json || { cat /tmp/smoke-a2v.json >&2; exit 1; }
R[audio2video_s]=$(since "$t")
R[audio2video]=$(tail -1 /tmp/smoke-a2v.json)

STEP="text2video"
t=$(now)
T2V=$(api t2v "$API_URL" "a lighthouse in a storm" | field '["id"]')
api finish "$API_URL" "$T2V" --timeout 300 >/tmp/smoke-t2v.json || { cat /tmp/smoke-t2v.json >&2; exit 1; }
R[text2video_s]=$(since "$t")
R[text2video]=$(tail -1 /tmp/smoke-t2v.json)

STEP="scale workers to 2"
t=$(now)
compose up -d --no-build --no-recreate --no-deps --scale worker=2 worker >&2
api workers "$API_URL" 2 --timeout 180 >/dev/null
R[scale_to_2_s]=$(since "$t")

STEP="kill a worker mid-job"
t=$(now)
JOB=$(api a2v "$API_URL" samples/portrait.png samples/speech.wav | field '["id"]')
VICTIM_WORKER=$(api running "$API_URL" "$JOB" --timeout 120 | field '["worker_id"]')
VICTIM_HOST="${VICTIM_WORKER##*@}" # cpu@<container hostname>#<pid>
VICTIM_HOST="${VICTIM_HOST%%#*}"
VICTIM=""
for c in $(compose ps -q worker); do
  if [ "$(docker inspect -f '{{.Config.Hostname}}' "$c")" = "$VICTIM_HOST" ]; then VICTIM=$c; fi
done
[ -n "$VICTIM" ] || { echo "no worker container has hostname $VICTIM_HOST" >&2; exit 1; }
say "SIGKILL worker container ${VICTIM:0:12} ($VICTIM_WORKER) while it generates job $JOB"
docker kill --signal KILL "$VICTIM" >/dev/null
api finish "$API_URL" "$JOB" --timeout 300 >/tmp/smoke-kill.json || { cat /tmp/smoke-kill.json >&2; exit 1; }
api once "$API_URL" "$JOB" --not-worker "$VICTIM_WORKER" >/tmp/smoke-once.json || {
  cat /tmp/smoke-once.json >&2
  exit 1
}
R[kill_test_s]=$(since "$t")
R[kill_test]=$(python3 -c "
import json,sys
f=json.loads(open('/tmp/smoke-kill.json').read().splitlines()[-1]); o=json.loads(open('/tmp/smoke-once.json').read().splitlines()[-1])
print(json.dumps({'status': f['status'], 'attempts': f['attempts'], 'killed_worker': sys.argv[1],
  'succeeded_on': o['succeeded_on'], 'succeeded_transitions': o['succeeded_transitions'],
  'transitions': o['transitions'], 'video_bytes': f.get('video_bytes')}))" "$VICTIM_WORKER")
compose up -d --no-build --no-recreate --no-deps --scale worker=2 worker >/dev/null 2>&1 # bring the victim back

STEP="restart redis"
t=$(now)
compose restart redis >&2
api ready "$API_URL" --timeout 120 >/dev/null
AFTER=$(api t2v "$API_URL" "a red kite after the restart" --frames 17 | field '["id"]')
api finish "$API_URL" "$AFTER" --timeout 300 >/tmp/smoke-redis.json || { cat /tmp/smoke-redis.json >&2; exit 1; }
R[redis_restart_s]=$(since "$t")
R[after_redis_restart]=$(tail -1 /tmp/smoke-redis.json)

STEP="health checks"
health() { for c in $(compose ps -q api worker beat); do docker inspect -f '{{.Name}}={{.State.Health.Status}}' "$c"; done; }
for _ in $(seq 60); do # a restarted container (the killed worker) starts over at `starting`
  states=$(health)
  if ! printf '%s\n' "$states" | grep -v '=healthy$' >/dev/null; then break; fi
  sleep 2
done
R[health]=$(printf '%s\n' "$states" | python3 -c "import json,sys; print(json.dumps(dict(l.strip().lstrip('/').split('=') for l in sys.stdin)))")
if printf '%s\n' "$states" | grep -v '=healthy$' >&2; then echo "unhealthy containers (above)" >&2; exit 1; fi

STEP="logs are JSON"
bad=$(compose logs --no-color --tail 50 api worker 2>/dev/null | sed -E 's/^[^|]*\| ?//' \
  | grep -v '^\s*$' | python3 -c "
import json,sys
n=0
for line in sys.stdin:
    line=line.strip()
    if not line.startswith('{'): n+=1; continue
    try: json.loads(line)
    except ValueError: n+=1
print(n)")
R[non_json_log_lines]=$bad
STEP="done"
