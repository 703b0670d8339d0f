#!/bin/sh
# A Redis Sentinel of the compose `scale` profile: watches the primary
# SENTINEL_PRIMARY (a compose service name, looked up once: a killed
# container's name leaves Docker's DNS, its address stays what Sentinel
# knows it by) as master SENTINEL_MASTER, quorum 2 of the three Sentinels.
set -eu
primary=${SENTINEL_PRIMARY:-redis}
until addr=$(getent hosts "$primary" | cut -d' ' -f1) && [ -n "$addr" ]; do
	sleep 0.5
done
cat >/data/sentinel.conf <<CONF
port 26379
dir /data
sentinel monitor ${SENTINEL_MASTER:-ragent} $addr 6379 2
sentinel down-after-milliseconds ${SENTINEL_MASTER:-ragent} ${SENTINEL_DOWN_AFTER_MS:-3000}
sentinel failover-timeout ${SENTINEL_MASTER:-ragent} 10000
sentinel parallel-syncs ${SENTINEL_MASTER:-ragent} 1
CONF
exec redis-server /data/sentinel.conf --sentinel
