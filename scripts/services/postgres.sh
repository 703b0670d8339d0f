# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# postgres service's settings and its start, stop and status steps. It uses the
# shared helpers defined there (log, die, status_line, wait_until, ...).

# --- postgres -----------------------------------------------------------------

pg_up() { pg_isready -q -h 127.0.0.1 -p "$PG_PORT" -t 2; }

# pg_admin DB ARGS... runs psql as the postgres superuser over the socket.
pg_admin() {
	local db=$1
	shift
	PGOPTIONS="-c client_min_messages=warning" runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$PG_PORT" -d "$db" "$@"
}

ensure_pgvector() {
	local ext_dir lib_dir
	ext_dir=$("$PG_CONFIG" --sharedir)/extension
	lib_dir=$("$PG_CONFIG" --pkglibdir)
	if [[ -f $ext_dir/vector.control && -f $lib_dir/vector.so ]]; then
		return 0
	fi
	ensure_packages "postgresql-server-dev-$PG_MAJOR" build-essential
	need_root "installing pgvector"

	local work
	work=$(mktemp -d "${TMPDIR:-/tmp}/ragent-pgvector.XXXXXX")
	log "building pgvector from Debian $PGVECTOR_SUITE's source package in $work"
	mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
	echo "deb-src $DEBIAN_MIRROR $PGVECTOR_SUITE main" >"$work/sources.list"
	# A private sources list, index and cache: the machine's own apt state
	# never sees trixie.
	local apt_opts=(
		-o "Dir::Etc::sourcelist=$work/sources.list"
		-o Dir::Etc::sourceparts=-
		-o "Dir::State::Lists=$work/lists"
		-o "Dir::Cache=$work/cache"
		-o APT::Sandbox::User=root
	)
	apt-get "${apt_opts[@]}" -qq update >&2 ||
		die "apt-get update of the private $PGVECTOR_SUITE source list failed"
	(cd "$work" && apt-get "${apt_opts[@]}" -qq source --download-only pgvector >/dev/null) ||
		die "apt-get source --download-only pgvector failed"
	local tarballs=("$work"/pgvector_*.orig.tar.gz)
	[[ -f ${tarballs[0]} ]] || die "no pgvector_*.orig.tar.gz downloaded in $work"
	tar -xzf "${tarballs[0]}" -C "$work/src" --strip-components=1
	log "building $(basename "${tarballs[0]}") (log: $work/build.log)"
	{
		make -C "$work/src" -j"$(nproc)" PG_CONFIG="$PG_CONFIG" &&
			make -C "$work/src" install PG_CONFIG="$PG_CONFIG"
	} >"$work/build.log" 2>&1 || {
		show_log_tail "$work/build.log"
		die "pgvector build/install failed (sources and log kept in $work)"
	}
	rm -rf "$work"
	[[ -f $ext_dir/vector.control ]] || die "pgvector installed but $ext_dir/vector.control is missing"
	log "pgvector $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$ext_dir/vector.control") installed"
}

ensure_pg_cluster() {
	local port
	port=$(pg_lsclusters -h | awk -v v="$PG_MAJOR" -v c="$PG_CLUSTER" '$1 == v && $2 == c { print $3 }')
	if [[ -z $port ]]; then
		need_root "creating the Postgres cluster"
		log "creating cluster $PG_MAJOR/$PG_CLUSTER"
		pg_createcluster "$PG_MAJOR" "$PG_CLUSTER" -p "$PG_PORT" >&2
		port=$PG_PORT
	fi
	[[ $port == "$PG_PORT" ]] ||
		die "cluster $PG_MAJOR/$PG_CLUSTER is configured for port $port, expected $PG_PORT"
}

# pg_settings prints the server settings ragent's Postgres runs with
# (docs/operations.md "Postgres settings"), sized from the machine's memory: a quarter
# of it for shared_buffers (capped at 4 GB: the vector index, the chunks
# and the keyword blocks a knowledge base of a million chunks reads),
# half for the planner's view of the page cache. WAL: lz4 compression of
# the full-page images written after each checkpoint, and checkpoints
# spaced out so a bulk load writes fewer of them.
pg_settings() {
	local mem_mb buffers_mb
	mem_mb=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
	buffers_mb=$((mem_mb / 4))
	((buffers_mb > 4096)) && buffers_mb=4096
	((buffers_mb < 128)) && buffers_mb=128
	cat <<CONF
# Written by scripts/services.sh (docs/operations.md "Postgres settings"); it rewrites
# this file when the settings change, so edit them there.
shared_buffers = ${buffers_mb}MB
max_connections = 300
effective_cache_size = $((mem_mb / 2))MB
maintenance_work_mem = 256MB
wal_compression = lz4
max_wal_size = 4GB
min_wal_size = 256MB
checkpoint_timeout = 15min
checkpoint_completion_target = 0.9
CONF
}

# configure_postgres writes pg_settings into the cluster's conf.d. A
# running server reloads it; shared_buffers only takes effect at a restart,
# which this never does to a server others may be using: it says so.
configure_postgres() {
	local conf
	conf=/etc/postgresql/$PG_MAJOR/$PG_CLUSTER/conf.d/ragent.conf
	if [[ -f $conf ]] && cmp -s "$conf" <(pg_settings); then
		return 0
	fi
	need_root "writing $conf"
	mkdir -p "$(dirname "$conf")"
	pg_settings >"$conf"
	chmod 644 "$conf"
	log "postgres: wrote $conf"
	if pg_ctlcluster "$PG_MAJOR" "$PG_CLUSTER" status >/dev/null 2>&1; then
		pg_ctlcluster "$PG_MAJOR" "$PG_CLUSTER" reload >&2
	fi
}

# pg_restart_note logs the settings a running server has not applied yet.
pg_restart_note() {
	local pending
	pending=$(pg_admin postgres -tA -c "SELECT string_agg(name, ', ') FROM pg_settings WHERE pending_restart")
	[[ -z $pending ]] ||
		log "postgres: $pending change at the next restart (scripts/services.sh stop postgres, then start postgres)"
}

start_postgres() {
	ensure_packages "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" build-essential
	ensure_pgvector
	ensure_pg_cluster
	configure_postgres
	if pg_ctlcluster "$PG_MAJOR" "$PG_CLUSTER" status >/dev/null 2>&1; then
		log "postgres: cluster $PG_MAJOR/$PG_CLUSTER already running"
	else
		need_root "starting Postgres"
		log "postgres: starting cluster $PG_MAJOR/$PG_CLUSTER"
		pg_ctlcluster "$PG_MAJOR" "$PG_CLUSTER" start >&2 || {
			show_log_tail "/var/log/postgresql/postgresql-$PG_MAJOR-$PG_CLUSTER.log"
			die "pg_ctlcluster $PG_MAJOR $PG_CLUSTER start failed"
		}
	fi
	wait_until 60 pg_up || {
		show_log_tail "/var/log/postgresql/postgresql-$PG_MAJOR-$PG_CLUSTER.log"
		die "postgres did not accept connections on 127.0.0.1:$PG_PORT within 60s"
	}

	need_root "setting up the ragent role and databases"
	# The app's role owns its databases and may create more (tests make one
	# each) but is not a superuser. pgvector is not a trusted extension, so
	# the postgres superuser installs it here: in template1, which every new
	# database copies, and in the two databases. Migrations then find it
	# (CREATE EXTENSION IF NOT EXISTS needs no privilege when it exists).
	pg_admin postgres <<'SQL'
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ragent') THEN
		CREATE ROLE ragent WITH LOGIN CREATEDB NOSUPERUSER PASSWORD 'ragent';
	END IF;
END
$$;
SQL
	pg_admin template1 -c 'CREATE EXTENSION IF NOT EXISTS vector'
	local db
	for db in ragent ragent_test; do
		pg_admin postgres <<SQL
SELECT 'CREATE DATABASE $db OWNER ragent' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$db')
\gexec
SQL
		pg_admin postgres -c "ALTER DATABASE $db OWNER TO ragent"
		pg_admin "$db" -c 'CREATE EXTENSION IF NOT EXISTS vector'
	done
	# Last, once every database has the extension: earlier versions of this
	# script made ragent a superuser; take that away (a no-op when done).
	pg_admin postgres <<'SQL'
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ragent'
	               AND rolcanlogin AND rolcreatedb AND NOT rolsuper) THEN
		ALTER ROLE ragent WITH LOGIN CREATEDB NOSUPERUSER;
	END IF;
END
$$;
SQL

	# Prove the settings we print work: password auth over TCP, pgvector on.
	local version
	if ! version=$(PGCONNECT_TIMEOUT=5 psql -X -tA "$(database_url ragent_test)" \
		-c "SELECT extversion FROM pg_extension WHERE extname = 'vector'" 2>&1); then
		# Only reset the password when password login fails, so warm runs
		# do not rewrite the role every time.
		log "postgres: password login failed ($version); resetting the ragent password"
		pg_admin postgres -c "ALTER ROLE ragent WITH PASSWORD 'ragent'"
		version=$(PGCONNECT_TIMEOUT=5 psql -X -tA "$(database_url ragent_test)" \
			-c "SELECT extversion FROM pg_extension WHERE extname = 'vector'") ||
			die "cannot log in as ragent over 127.0.0.1:$PG_PORT"
	fi
	[[ -n $version ]] || die "pgvector is not enabled in ragent_test"
	local super
	super=$(pg_admin postgres -tA -c "SELECT rolsuper FROM pg_roles WHERE rolname = 'ragent'")
	[[ $super == f ]] || die "the ragent role is still a superuser"
	pg_restart_note
	log "postgres: up on 127.0.0.1:$PG_PORT (pgvector $version)"
}

stop_postgres() {
	if pg_ctlcluster "$PG_MAJOR" "$PG_CLUSTER" status >/dev/null 2>&1; then
		log "postgres: stopping cluster $PG_MAJOR/$PG_CLUSTER"
		pg_ctlcluster "$PG_MAJOR" "$PG_CLUSTER" stop >&2
	else
		log "postgres: not running"
	fi
}

status_postgres() { status_line postgres "127.0.0.1:$PG_PORT" "127.0.0.1:$PG_PORT" pg_up; }

database_url() { echo "postgres://ragent:ragent@127.0.0.1:$PG_PORT/$1?sslmode=disable"; }
