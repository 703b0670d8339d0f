#!/usr/bin/env bash
# The node, with the settings and JVM options scripts/services.sh starts it
# with (start_opensearch), listening on the compose network.
set -euo pipefail
home=/opt/ragent/opensearch-2.19.6/home
state=/home/opensearch
heap=${OPENSEARCH_HEAP:-512m}
mkdir -p "$state/config" "$state/data" "$state/logs" "$state/tmp"
cat >"$state/config/opensearch.yml" <<YML
cluster.name: ragent
node.name: ragent-1
network.host: 0.0.0.0
http.port: 9200
transport.port: 9300
discovery.type: single-node
path.data: $state/data
path.logs: $state/logs
cluster.routing.allocation.disk.threshold_enabled: false
YML
exec java "-Xms$heap" "-Xmx$heap" \
	-XX:+UseG1GC -XX:-OmitStackTraceInFastThrow -XX:+ExitOnOutOfMemoryError \
	-Xss1m -Djava.awt.headless=true -Dfile.encoding=UTF-8 -Djna.nosys=true \
	-Dio.netty.noUnsafe=true -Dio.netty.noKeySetOptimization=true \
	-Dio.netty.recycler.maxCapacityPerThread=0 -Dio.netty.allocator.numDirectArenas=0 \
	-Dlog4j.shutdownHookEnabled=false -Dlog4j2.disable.jmx=true -Dlog4j2.formatMsgNoLookups=true \
	-Djava.locale.providers=SPI,COMPAT -Djava.security.manager=allow \
	-Djava.io.tmpdir="$state/tmp" \
	-Dopensearch.path.home="$home" -Dopensearch.path.conf="$state/config" \
	-Dopensearch.distribution.type=tar -Dopensearch.bundled_jdk=false \
	-cp "$home/lib/*" org.opensearch.bootstrap.OpenSearch
