#!/usr/bin/env bash
# Sets up and runs the whole suite: .venv with the project and its dev tools, ffmpeg and espeak-ng,
# a Redis and a PostgreSQL to test against (the ones on 127.0.0.1 if they answer, else started
# here), then lint, type checks, the unit tier (no services) and the integration tier. Extra
# arguments go to pytest instead (one run of what they select).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
cd "$ROOT"

ensure_ffmpeg
command -v espeak-ng >/dev/null || apt_install espeak-ng || true
# The browser tests drive Debian's chromium (never a downloaded browser); without it they fail.
[ -x /usr/bin/chromium ] || apt_install chromium || true
# pg_dump and pg_restore: the backup-and-restore test dumps and restores its database.
command -v pg_restore >/dev/null || apt_install postgresql-client || true
# diffusers: the Wan2.1 diffusers back end is tested for real (a tiny random pipeline on the CPU).
# docs: MkDocs and its Material theme build the manual (docs/) below.
# tracing: OpenTelemetry, whose traces across the API and worker processes are tested.
ensure_venv "worker,dev,diffusers,embedded,docs,tracing"
PYBIN="$VENV/bin/python"
SERVICES="$ROOT/var/test-services"
mkdir -p "$SERVICES"
cleanup() { [ -n "${REDIS_PID:-}" ] && kill "$REDIS_PID" 2>/dev/null || true; }
trap cleanup EXIT

# --- Redis ---------------------------------------------------------------------------------------
if [ -z "${JOBSERVICE_TEST_REDIS_URL:-}" ]; then
  if "$PYBIN" -c "import redis; redis.Redis(host='127.0.0.1', port=6379, socket_connect_timeout=1).ping()" 2>/dev/null; then
    export JOBSERVICE_TEST_REDIS_URL="redis://127.0.0.1:6379/13"
  else
    say "no Redis on 127.0.0.1:6379; starting a private one"
    BIN="$("$PYBIN" -c "from jobservice.cli.embedded import redis_binary; print(redis_binary())")"
    "$BIN" --port 0 --unixsocket "$SERVICES/redis.sock" --save "" --appendonly no --dir "$SERVICES" \
      --logfile "$SERVICES/redis.log" & REDIS_PID=$!
    for _ in $(seq 1 50); do [ -S "$SERVICES/redis.sock" ] && break; sleep 0.1; done
    export JOBSERVICE_TEST_REDIS_URL="redis+socket://$SERVICES/redis.sock?virtual_host=13"
  fi
fi

# --- PostgreSQL ----------------------------------------------------------------------------------
pg_ok() { "$PYBIN" -c "import psycopg,sys; psycopg.connect(sys.argv[1], connect_timeout=2).close()" "$1" 2>/dev/null; }
if [ -z "${JOBSERVICE_TEST_PG_URL:-}" ]; then
  if pg_ok "postgresql://postgres@127.0.0.1:5432/postgres"; then
    export JOBSERVICE_TEST_PG_URL="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
  else
    if ! command -v pg_ctlcluster >/dev/null; then apt_install postgresql; fi
    if ! pg_ok "postgresql://jobservice_test:jobservice_test@127.0.0.1:5432/postgres"; then
      say "starting PostgreSQL and creating the jobservice_test role"
      pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start 2>/dev/null || true
      for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 && break; sleep 0.2; done
      su postgres -c "psql -q -c \"DO \\\$\\\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobservice_test') THEN CREATE ROLE jobservice_test LOGIN CREATEDB PASSWORD 'jobservice_test'; END IF; END \\\$\\\$;\""
    fi
    export JOBSERVICE_TEST_PG_URL="postgresql+psycopg://jobservice_test:jobservice_test@127.0.0.1:5432/postgres"
  fi
fi

say "lint and types"
"$VENV/bin/ruff" check jobservice workers tests scripts docs
"$VENV/bin/ruff" format --check jobservice workers tests scripts docs/hooks  # not docs/*.md: examples keep their layout
"$VENV/bin/mypy"
"$VENV/bin/lint-imports"  # import rules: [tool.importlinter] in pyproject.toml
# The manual, strictly: a broken link or anchor, or a page missing from the nav, fails (mkdocs.yml).
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet --site-dir "$ROOT/var/site"

if [ "$#" -gt 0 ]; then  # a chosen subset: one run against the real services
  say "tests (Redis: $JOBSERVICE_TEST_REDIS_URL; PostgreSQL: ${JOBSERVICE_TEST_PG_URL%%@*}@...)"
  exec "$VENV/bin/pytest" "$@"
fi
# Each tier runs in two processes (pytest-xdist), a file's tests in one of them: most of the
# integration tier waits on worker processes, ffmpeg and restarts, so two halve its time on two
# cores. Each process flushes a Redis database of its own (tests/conftest.py: per_worker).
# JOBSERVICE_TEST_PROCESSES=1 runs each tier in one.
PROCESSES="${JOBSERVICE_TEST_PROCESSES:-2}"
# The unit tier runs with every service pointed at a closed port: it must need none of them.
say "unit tier, $PROCESSES processes (no Redis, no PostgreSQL, no S3 server)"
JOBSERVICE_TEST_REDIS_URL="redis://127.0.0.1:1/0" JOBSERVICE_TEST_PG_URL="postgresql+psycopg://nobody@127.0.0.1:1/none" \
  "$VENV/bin/pytest" -m "not integration" -n "$PROCESSES" --dist loadfile
say "integration tier, $PROCESSES processes (Redis: $JOBSERVICE_TEST_REDIS_URL, a database up per process; PostgreSQL: ${JOBSERVICE_TEST_PG_URL%%@*}@...)"
"$VENV/bin/pytest" -m "integration and not alone" -n "$PROCESSES" --dist loadfile
# Tests that judge timings (a nightly batch's verdict on an unchanged model) run with nothing beside
# them: with another process's tests on the other core, every run of theirs reads disturbed.
say "integration tier, the tests that judge timings, one process"
"$VENV/bin/pytest" -m "integration and alone"
