# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# redis-sentinel and redis-cluster services' settings and their start, stop
# and status steps. It uses the shared helpers defined there (log, die,
# status_line, wait_until, ...).

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
