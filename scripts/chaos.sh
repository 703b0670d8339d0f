#!/usr/bin/env bash
# scripts/chaos.sh redis-failover: the Redis failover test of RELIABILITY.md.
# Three in-process ragent instances on a Redis topology the test starts on
# free ports (Sentinel, Cluster, a single node away for 20 s), a fake model
# counting its concurrent calls, 60 chats from 6 users, the Redis killed
# mid-load. Needs Postgres (scripts/services.sh start postgres redis) and
# redis-server/redis-cli; prints one table.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
redis-failover)
	mkdir -p bin
	go test -c -o bin/chaos.test ./cmd/ragent/
	cd cmd/ragent
	RAGENT_CHAOS=1 RAGENT_REQUIRE_SERVICES=1 ../../bin/chaos.test \
		-test.run '^TestRedisFailoverChaos$' -test.count=1 -test.timeout=10m
	;;
*)
	echo "usage: scripts/chaos.sh redis-failover" >&2
	exit 2
	;;
esac
