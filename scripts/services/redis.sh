# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# redis service's settings and its start, stop and status steps. It uses the
# shared helpers defined there (log, die, status_line, wait_until, ...).

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
