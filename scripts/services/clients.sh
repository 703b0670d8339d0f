# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# clients service's settings and its start, stop and status steps. It uses the
# shared helpers defined there (log, die, status_line, wait_until, ...).

# --- clients ------------------------------------------------------------------

# The OpenAI-compatible API (/v1/chat/completions) is tested with the official
# SDKs nobody here wrote (cmd/ragent/openai_clients_test.go): the `openai`
# package from PyPI in a venv and the `openai` package from npm in a prefix,
# both under the cache dir, pinned, reinstalled only when the pin changes.
readonly OPENAI_PY_VERSION=${RAGENT_OPENAI_PY_VERSION:-3.57.0}
readonly OPENAI_JS_VERSION=${RAGENT_OPENAI_JS_VERSION:-6.30.1}
# The MCP server (/mcp) is tested with the official MCP SDKs in the same
# venv and prefix (cmd/ragent/mcp_clients_test.go): PyPI's mcp and npm's
# @modelcontextprotocol/sdk.
readonly MCP_PY_VERSION=${RAGENT_MCP_PY_VERSION:-2.3.0}
readonly MCP_JS_VERSION=${RAGENT_MCP_JS_VERSION:-1.32.2}
readonly CLIENTS_DIR=$CACHE_ROOT/clients
readonly CLIENTS_VENV=$CLIENTS_DIR/venv
readonly CLIENTS_NPM=$CLIENTS_DIR/npm

clients_python() { "$CLIENTS_VENV/bin/python" -c 'import openai; print(openai.__version__)' 2>/dev/null; }
clients_node() {
	# By path: the package's exports map does not expose package.json.
	(cd "$CLIENTS_NPM" 2>/dev/null && node -p 'require("./node_modules/openai/package.json").version' 2>/dev/null)
}
clients_mcp_python() { "$CLIENTS_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null; }
clients_mcp_node() {
	(cd "$CLIENTS_NPM" 2>/dev/null && node -p 'require("./node_modules/@modelcontextprotocol/sdk/package.json").version' 2>/dev/null)
}

start_clients() {
	# Debian's python3 has no venv module without python3-venv; bookworm's
	# nodejs (18) runs the SDK (openai 7 wants Node 22, so 6.x is pinned),
	# with its npm packaged apart.
	if [[ ! -x /usr/bin/python3 ]] || ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
		ensure_packages python3 python3-venv
	fi
	command -v node >/dev/null 2>&1 || ensure_packages nodejs
	command -v npm >/dev/null 2>&1 || ensure_packages npm
	mkdir -p "$CLIENTS_DIR"
	if [[ $(clients_python) != "$OPENAI_PY_VERSION" ]]; then
		log "clients: installing openai==$OPENAI_PY_VERSION (PyPI) into $CLIENTS_VENV"
		[[ -x $CLIENTS_VENV/bin/python ]] || /usr/bin/python3 -m venv "$CLIENTS_VENV" >&2 ||
			die "python3 -m venv $CLIENTS_VENV failed"
		"$CLIENTS_VENV/bin/python" -m pip install -q --disable-pip-version-check "openai==$OPENAI_PY_VERSION" >&2 ||
			die "pip install openai==$OPENAI_PY_VERSION failed"
	fi
	if [[ $(clients_node) != "$OPENAI_JS_VERSION" ]]; then
		log "clients: installing openai@$OPENAI_JS_VERSION (npm) into $CLIENTS_NPM"
		mkdir -p "$CLIENTS_NPM"
		[[ -f $CLIENTS_NPM/package.json ]] || echo '{"private":true}' >"$CLIENTS_NPM/package.json"
		(cd "$CLIENTS_NPM" && npm install --silent --no-audit --no-fund "openai@$OPENAI_JS_VERSION" >&2) ||
			die "npm install openai@$OPENAI_JS_VERSION failed"
	fi
	if [[ $(clients_mcp_python) != "$MCP_PY_VERSION" ]]; then
		log "clients: installing mcp==$MCP_PY_VERSION (PyPI) into $CLIENTS_VENV"
		"$CLIENTS_VENV/bin/python" -m pip install -q --disable-pip-version-check "mcp==$MCP_PY_VERSION" >&2 ||
			die "pip install mcp==$MCP_PY_VERSION failed"
	fi
	if [[ $(clients_mcp_node) != "$MCP_JS_VERSION" ]]; then
		log "clients: installing @modelcontextprotocol/sdk@$MCP_JS_VERSION (npm) into $CLIENTS_NPM"
		(cd "$CLIENTS_NPM" && npm install --silent --no-audit --no-fund "@modelcontextprotocol/sdk@$MCP_JS_VERSION" >&2) ||
			die "npm install @modelcontextprotocol/sdk@$MCP_JS_VERSION failed"
	fi
	log "clients: python openai $(clients_python) mcp $(clients_mcp_python), node $(node --version) openai $(clients_node) @modelcontextprotocol/sdk $(clients_mcp_node)"
}

stop_clients() { :; }

status_clients() {
	local py js mpy mjs
	py=$(clients_python) || py=
	js=$(clients_node) || js=
	mpy=$(clients_mcp_python) || mpy=
	mjs=$(clients_mcp_node) || mjs=
	if [[ $py == "$OPENAI_PY_VERSION" && $js == "$OPENAI_JS_VERSION" && $mpy == "$MCP_PY_VERSION" && $mjs == "$MCP_JS_VERSION" ]]; then
		echo "clients   up    python openai $py mcp $mpy, node openai $js @modelcontextprotocol/sdk $mjs"
	else
		echo "clients   down  python openai ${py:-missing} (want $OPENAI_PY_VERSION) mcp ${mpy:-missing} (want $MCP_PY_VERSION)," \
			"node openai ${js:-missing} (want $OPENAI_JS_VERSION) @modelcontextprotocol/sdk ${mjs:-missing} (want $MCP_JS_VERSION)"
		return 1
	fi
}
