#!/usr/bin/env bash
# First start (empty $PGDATA): initdb, then — on the socket only — the role
# and database ragent uses, as scripts/services.sh makes them: ragent owns
# its database and is no superuser; pgvector (not a trusted extension) is
# created by the superuser in template1 and in ragent. Then the server.
set -euo pipefail
bin=/usr/lib/postgresql/15/bin
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (the postgres superuser password)}"
: "${RAGENT_DB_PASSWORD:?set RAGENT_DB_PASSWORD (the ragent role password)}"
if [[ ! -s $PGDATA/PG_VERSION ]]; then
	pwfile=$(mktemp)
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	"$bin/initdb" -D "$PGDATA" -U postgres --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
		--auth-local=peer --auth-host=scram-sha-256 >/dev/null
	rm -f "$pwfile"
	echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
	"$bin/pg_ctl" -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
	psql -X -q -v ON_ERROR_STOP=1 -U postgres -d postgres -v pw="$RAGENT_DB_PASSWORD" <<'SQL'
CREATE ROLE ragent WITH LOGIN CREATEDB NOSUPERUSER PASSWORD :'pw';
CREATE DATABASE ragent OWNER ragent;
\c template1
CREATE EXTENSION IF NOT EXISTS vector;
\c ragent
CREATE EXTENSION IF NOT EXISTS vector;
SQL
	"$bin/pg_ctl" -D "$PGDATA" -w stop >/dev/null
	echo "ragent-postgres: initialised $PGDATA (role and database ragent, pgvector)"
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' \
	-c shared_buffers="${POSTGRES_SHARED_BUFFERS:-256MB}" -c wal_compression=lz4 \
	-c max_wal_size=4GB -c checkpoint_timeout=15min "$@"
