# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# browser service's settings and its start, stop and status steps. It uses the
# shared helpers defined there (log, die, status_line, wait_until, ...).

# --- browser ------------------------------------------------------------------

# The browser tests (cmd/ragent/browser_test.go) drive Debian's Chromium
# headless; without the CJK fonts their screenshots of the Chinese UI would
# show boxes. Nothing runs between tests, so start only installs and checks.
readonly CHROMIUM=/usr/bin/chromium

chromium_version() { "$CHROMIUM" --version 2>/dev/null; }

start_browser() {
	ensure_packages chromium fonts-noto-cjk
	local version
	version=$(chromium_version) || die "$CHROMIUM --version failed"
	log "browser: $version"
}

stop_browser() { :; }

status_browser() {
	local version
	if version=$(chromium_version) &&
		[[ $(dpkg-query -W -f='${Status}' fonts-noto-cjk 2>/dev/null) == "install ok installed" ]]; then
		echo "browser   up    $version"
	else
		echo "browser   down  $CHROMIUM with CJK fonts"
		return 1
	fi
}
