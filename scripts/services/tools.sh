# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# tools service's settings and its start, stop and status steps. It uses the
# shared helpers defined there (log, die, status_line, wait_until, ...).

# --- tools --------------------------------------------------------------------

# The pipeline script of docs/pipelines.md (run by TestPipelineREADMEScript) uses
# curl and jq, as a pipeline would. Nothing runs: start only installs.
start_tools() {
	ensure_packages curl jq
	log "tools: $(curl --version | head -n1 | cut -d' ' -f1-2), $(jq --version)"
}

stop_tools() { :; }

tools_installed() { command -v curl >/dev/null && command -v jq >/dev/null; }

status_tools() { status_line tools "curl, jq" "curl and jq" tools_installed; }
