#!/bin/sh
# First start: a cluster owned by postgres with POSTGRES_USER (password POSTGRES_PASSWORD) owning
# POSTGRES_DB. Then postgres in the foreground with the arguments given (e.g. -p PORT).
set -eu
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 0700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp); printf '%s\n' "$POSTGRES_PASSWORD" > "$pw"; chown postgres "$pw"
  runuser -u postgres -- initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" -A scram-sha-256 >/dev/null
  rm -f "$pw"
  runuser -u postgres -- postgres -D "$PGDATA" -c listen_addresses= -k /run/postgresql &
  until runuser -u postgres -- pg_isready -q -h /run/postgresql; do sleep 0.2; done
  PGPASSWORD=$POSTGRES_PASSWORD runuser -u postgres -- psql -q -h /run/postgresql -U "$POSTGRES_USER" -d postgres \
    -c "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\"" 2>/dev/null || true
  runuser -u postgres -- pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec runuser -u postgres -- postgres -D "$PGDATA" -c listen_addresses=127.0.0.1 -k /run/postgresql "$@"
