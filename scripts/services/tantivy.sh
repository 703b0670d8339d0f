# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# tantivy service's settings and its start, stop and status steps. It uses the
# shared helpers defined there (log, die, status_line, wait_until, ...).

# --- tantivy ------------------------------------------------------------------

# The scale benchmark (scripts/scalebench.sh) times the same queries in
# tantivy, a Lucene-class engine, through its PyPI bindings in a venv of
# their own. Nothing runs: start only installs and checks.
readonly TANTIVY_VERSION=${RAGENT_TANTIVY_VERSION:-0.27.0}
readonly TANTIVY_VENV=$CACHE_ROOT/tantivy-$TANTIVY_VERSION

tantivy_version() { "$TANTIVY_VENV/bin/python" -c 'import tantivy, importlib.metadata as m; print(m.version("tantivy"))' 2>/dev/null; }

start_tantivy() {
	if [[ $(tantivy_version) != "$TANTIVY_VERSION" ]]; then
		command -v python3 >/dev/null || ensure_packages python3 python3-venv
		python3 -m venv "$TANTIVY_VENV" || { ensure_packages python3-venv && python3 -m venv "$TANTIVY_VENV"; }
		"$TANTIVY_VENV/bin/pip" install --quiet "tantivy==$TANTIVY_VERSION" >&2
	fi
	log "tantivy: $(tantivy_version) in $TANTIVY_VENV"
}

stop_tantivy() { :; }

status_tantivy() {
	local version
	if version=$(tantivy_version); then
		echo "tantivy   up    $version in $TANTIVY_VENV"
	else
		echo "tantivy   down  $TANTIVY_VENV"
		return 1
	fi
}
