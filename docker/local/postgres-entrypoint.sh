#!/bin/sh
# Like the official postgres image: on an empty $PGDATA, initdb with POSTGRES_USER/POSTGRES_PASSWORD,
# create POSTGRES_DB, accept password logins from the network; then run the command.
set -eu
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "postgres-entrypoint: POSTGRES_PASSWORD is required" >&2
    exit 1
  fi
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA" >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    createdb --username="$POSTGRES_USER" "$POSTGRES_DB"
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  fi
  echo "postgres-entrypoint: initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
exec "$@"
