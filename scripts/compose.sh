#!/usr/bin/env bash
# Runs the Docker Compose stack (docker-compose.yml) on a Debian 12 machine,
# installing what is missing first (docs/operations.md "Docker Compose"):
#
#   scripts/compose.sh setup    the engine (Debian's docker.io) and Compose v2 when missing,
#                               dockerd when not running (no systemd: in the background,
#                               log in $RAGENT_COMPOSE_STATE/dockerd.log), and the base
#                               image debian:bookworm-slim when missing (debootstrap, for
#                               machines that cannot pull from Docker Hub)
#   scripts/compose.sh build    setup, then build every image (cached: a warm build is seconds)
#   scripts/compose.sh prebuild setup and build every image the smoke tests use (both profiles),
#                               in the background (log: $RAGENT_COMPOSE_STATE/prebuild.log); the
#                               next smoke waits for it. make test starts it before the Go tests:
#                               a cold build is mostly downloads (17.5 min, 4 CPU-minutes, 2026-12-02)
#   scripts/compose.sh up       setup, then `docker compose up --wait` (builds missing images)
#   scripts/compose.sh down     `docker compose down` (the volumes stay)
#   scripts/compose.sh smoke    the smoke test (internal/composetest) on a project of its own
#                               (ragent-smoke, fresh volumes, ragent on 127.0.0.1:$RAGENT_COMPOSE_PORT,
#                               default 18080), then removes that project's containers and volumes;
#                               with COMPOSE_PROFILES=scale, the scale profile behind its load balancer
#                               on that port, with the fake model (TestComposeScale)
#
# Extra arguments go to docker compose (e.g. `up --profile opensearch`). It never
# publishes a port but ragent's and never touches services running on the host.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
readonly STATE=${RAGENT_COMPOSE_STATE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/ragent/compose}
readonly COMPOSE_VERSION=v2.29.7
readonly BASE_IMAGE=debian:bookworm-slim
readonly DEBIAN_MIRROR=${RAGENT_DEBIAN_MIRROR:-http://deb.debian.org/debian}

log() { printf '[compose] %s\n' "$*" >&2; }
die() {
	printf '[compose] ERROR: %s\n' "$*" >&2
	exit 1
}

ensure_engine() {
	if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
		[[ $(id -u) -eq 0 ]] || die "installing docker.io needs root"
		log "installing Debian's docker.io"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >&2 || die "apt-get install docker.io failed"
	fi
	docker info >/dev/null 2>&1 && return 0
	[[ $(id -u) -eq 0 ]] || die "starting dockerd needs root"
	mkdir -p "$STATE"
	if dockerd_alive; then
		log "dockerd is starting; waiting for it"
	else
		clear_stale_engine_state
		log "starting dockerd (log: $STATE/dockerd.log)"
		setsid nohup dockerd >>"$STATE/dockerd.log" 2>&1 </dev/null &
	fi
	local deadline=$((SECONDS + 90))
	until docker info >/dev/null 2>&1; do
		((SECONDS < deadline)) || {
			tail -n 30 "$STATE/dockerd.log" >&2
			die "dockerd did not answer within 90s"
		}
		sleep 0.5
	done
}

# dockerd_alive: the process /var/run/docker.pid names is a dockerd.
dockerd_alive() {
	local pid
	pid=$(cat /var/run/docker.pid 2>/dev/null) && [[ -n $pid ]] &&
		[[ $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]]
}

# What a killed dockerd leaves behind: its pid file (dockerd refuses to
# start while it exists), and its containerd's pid file and sockets when
# that containerd is gone too.
clear_stale_engine_state() {
	local pid
	if [[ -f /var/run/docker.pid ]]; then
		log "removing the stale /var/run/docker.pid"
		rm -f /var/run/docker.pid
	fi
	local cd=/var/run/docker/containerd
	if pid=$(cat "$cd/containerd.pid" 2>/dev/null) && [[ -n $pid ]] &&
		[[ $(cat "/proc/$pid/comm" 2>/dev/null) != containerd ]]; then
		log "removing the stale containerd state of a killed dockerd ($cd)"
		rm -f "$cd/containerd.pid" "$cd/containerd.sock" "$cd/containerd.sock.ttrpc" "$cd/containerd-debug.sock"
	fi
}

# Compose v2 is not packaged in Debian 12: build the plugin from its Go module.
ensure_compose() {
	docker compose version >/dev/null 2>&1 && return 0
	command -v go >/dev/null || die "docker compose is missing and there is no go to build it with"
	log "building Compose $COMPOSE_VERSION from its Go module"
	local bin
	bin=$(mktemp -d)
	GOBIN=$bin go install "github.com/docker/compose/v2/cmd@$COMPOSE_VERSION" >&2 || die "go install compose failed"
	mkdir -p "${HOME:-/root}/.docker/cli-plugins"
	mv "$bin/cmd" "${HOME:-/root}/.docker/cli-plugins/docker-compose"
	rm -rf "$bin"
	docker compose version >&2
}

# The one image the Dockerfiles start FROM, made locally where Docker Hub
# cannot be reached (a machine that can pull simply pulls it).
ensure_base_image() {
	docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
	if docker pull -q "$BASE_IMAGE" >/dev/null 2>&1; then
		return 0
	fi
	[[ $(id -u) -eq 0 ]] || die "making $BASE_IMAGE needs root"
	command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2
	local dir
	dir=$(mktemp -d)
	log "making $BASE_IMAGE with debootstrap (Docker Hub is not reachable)"
	debootstrap --variant=minbase bookworm "$dir" "$DEBIAN_MIRROR" >"$dir.log" 2>&1 || {
		tail -n 30 "$dir.log" >&2
		die "debootstrap failed"
	}
	# This machine's own certificate authorities (a TLS-inspecting egress
	# proxy's, say): the images' ca-certificates package picks them up, so
	# apt, pip, Maven and curl inside the builds trust what the host trusts.
	if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
		mkdir -p "$dir/usr/local/share/ca-certificates"
		cp /usr/local/share/ca-certificates/*.crt "$dir/usr/local/share/ca-certificates/"
	fi
	tar -C "$dir" -c . | docker import - "$BASE_IMAGE" >/dev/null
	rm -rf "$dir" "$dir.log"
}

setup() {
	ensure_engine
	ensure_compose
	ensure_base_image
}

dc() { (cd "$ROOT" && docker compose "$@"); }

# prebuild: `build` of both smoke profiles' images in the background,
# detached from the caller (make runs each recipe line in a shell of its
# own). Its exit status lands in prebuild.rc, which the next smoke waits for.
prebuild() {
	mkdir -p "$STATE"
	rm -f "$STATE/prebuild.rc"
	COMPOSE_PROFILES=scale,fakellm setsid nohup bash -c '
		bash "$1" setup && bash "$1" build
		echo $? >"$2/prebuild.rc"' prebuild "${BASH_SOURCE[0]}" "$STATE" \
		>"$STATE/prebuild.log" 2>&1 </dev/null &
	echo $! >"$STATE/prebuild.pid"
	log "building the images in the background (pid $!, log: $STATE/prebuild.log)"
}

# prebuild_alive: the process is still our background build (not a pid
# reused since by something else).
prebuild_alive() {
	tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q ' prebuild '
}

# await_prebuild: when a prebuild was started, wait for it to end and fail
# with its log when it failed. Without one (or once consumed) it returns at
# once; smoke then builds what is missing itself.
await_prebuild() {
	local pid
	pid=$(cat "$STATE/prebuild.pid" 2>/dev/null) || return 0
	local t0=$SECONDS
	until [[ -f $STATE/prebuild.rc ]]; do
		if ! prebuild_alive "$pid" && [[ ! -f $STATE/prebuild.rc ]]; then
			# Gone without a status: killed. Build in the foreground instead.
			log "the background build (pid $pid) ended without a status; building here"
			rm -f "$STATE/prebuild.pid"
			return 0
		fi
		sleep 2
	done
	local rc
	rc=$(cat "$STATE/prebuild.rc")
	rm -f "$STATE/prebuild.pid" "$STATE/prebuild.rc"
	if [[ $rc != 0 ]]; then
		tail -n 60 "$STATE/prebuild.log" >&2
		die "the background image build failed (exit $rc; log: $STATE/prebuild.log)"
	fi
	log "background image build: done (waited $((SECONDS - t0))s for it)"
}

smoke() {
	export COMPOSE_PROJECT_NAME=ragent-smoke
	local addr=127.0.0.1:${RAGENT_COMPOSE_PORT:-18080} test=TestComposeSmoke
	local targets=()
	if [[ ${COMPOSE_PROFILES:-} == *scale* ]]; then
		# Three replicas behind the load balancer, with the fake model
		# counting calls and two chats at once (TestComposeScale).
		test=TestComposeScale
		targets=(lb fakellm)
		export COMPOSE_PROFILES=$COMPOSE_PROFILES,fakellm RAGENT_LB_PUBLISH=$addr
		export RAGENT_LLM_PROVIDER=openai RAGENT_LLM_BASE_URL=http://fakellm:8000/v1 \
			RAGENT_LLM_API_KEY=fake RAGENT_LLM_CHAT_MODEL=fake
		export RAGENT_CHAT_MAX_CONCURRENT=2 RAGENT_CHAT_MAX_QUEUED_PER_USER=20 RAGENT_CHAT_MAX_WAIT=3m \
			RAGENT_CHAT_RATE_PER_MINUTE=1000 RAGENT_CHAT_LEASE=30s RAGENT_INGEST_PENDING_TIMEOUT=1m
	else
		export RAGENT_PUBLISH=$addr
	fi
	dc down -v --remove-orphans >/dev/null 2>&1 || true
	local t0=$SECONDS rc=0
	dc build "$@" >&2 || die "docker compose build failed"
	log "build: $((SECONDS - t0))s"
	t0=$SECONDS
	dc up --wait "$@" "${targets[@]}" || {
		dc ps -a >&2
		dc logs --no-color --tail 40 >&2
		dc down -v >/dev/null 2>&1 || true
		die "docker compose up --wait failed"
	}
	log "up --wait: $((SECONDS - t0))s"
	t0=$SECONDS
	(cd "$ROOT" && RAGENT_COMPOSE_URL=http://$addr go test -count=1 -timeout 20m -v -run "^$test\$" ./internal/composetest/) || rc=$?
	log "$test: $((SECONDS - t0))s, exit $rc"
	if ((rc != 0)); then
		dc ps -a >&2 || true
		dc logs --no-color --tail 60 >&2 || true
	fi
	dc down -v --remove-orphans >/dev/null 2>&1 || true
	return "$rc"
}

main() {
	local cmd=${1:-}
	(($# > 0)) && shift
	case $cmd in
	setup) setup ;;
	build) setup && dc build "$@" ;;
	prebuild) prebuild ;;
	up) setup && dc up --wait "$@" ;;
	down) dc down "$@" ;;
	smoke) await_prebuild && setup && smoke "$@" ;;
	*)
		echo "usage: $0 setup|build|prebuild|up|down|smoke [docker compose arguments]" >&2
		exit 2
		;;
	esac
}

main "$@"
