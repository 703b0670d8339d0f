#!/usr/bin/env bash
# ragent-rocketmq namesrv|broker: one JVM, with the options scripts/services.sh
# starts it with (rmq_launch). The broker's settings come from the
# environment: BROKER_NAMESRV (host:port) and BROKER_IP (the address it
# advertises to clients; default: the container's own IP, which the
# clients' library needs: it takes IPs only).
set -euo pipefail
lib=/opt/ragent/rocketmq-5.3.3/lib
home=/home/rocketmq
mkdir -p "$home/conf" "$home/home" "$home/store"
case ${1:-} in
namesrv)
	printf 'listenPort=9876\n' >"$home/conf/namesrv.properties"
	main=org.apache.rocketmq.namesrv.NamesrvStartup
	config=$home/conf/namesrv.properties
	heap=(-Xms128m -Xmx256m)
	;;
broker)
	# The settings shared with the host's broker: scripts/rocketmq/broker.conf.
	{
		cat <<CONF
brokerName=broker-a
namesrvAddr=${BROKER_NAMESRV:?set BROKER_NAMESRV}
brokerIP1=${BROKER_IP:-$(hostname -i | awk '{print $1}')}
listenPort=10911
storePathRootDir=$home/store
storePathCommitLog=$home/store/commitlog
CONF
		grep -v '^#' /src/scripts/rocketmq/broker.conf
	} >"$home/conf/broker.conf"
	main=org.apache.rocketmq.broker.BrokerStartup
	config=$home/conf/broker.conf
	heap=(-Xms256m -Xmx512m -XX:MaxDirectMemorySize=256m -Drocketmq.broker.diskSpaceWarningLevelRatio=0.98)
	;;
*)
	echo "usage: ragent-rocketmq namesrv|broker" >&2
	exit 2
	;;
esac
export ROCKETMQ_HOME=$home/home
exec java -server -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow -XX:+ExitOnOutOfMemoryError \
	"${heap[@]}" \
	--add-opens=java.base/java.nio=ALL-UNNAMED \
	--add-exports=java.base/sun.nio.ch=ALL-UNNAMED \
	--add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
	--add-opens=java.base/java.lang=ALL-UNNAMED \
	--add-opens=java.base/java.util=ALL-UNNAMED \
	--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED \
	-Duser.home="$home" -Drocketmq.home.dir="$home/home" \
	-Drmq.logback.configurationFile="rmq.$1.logback.xml" \
	-cp "$lib/*" "$main" -c "$config"
