# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# opensearch service's settings and its start, stop and status steps. It uses the
# shared helpers defined there (log, die, status_line, wait_until, ...).

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
