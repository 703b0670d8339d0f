# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# rocketmq service's settings and its start, stop and status steps. It uses the
# shared helpers defined there (log, die, status_line, wait_until, ...).

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
