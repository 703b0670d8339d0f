#!/usr/bin/env bash
# Runs one compiled test binary's tests in SHARDS processes at once, so that a
# package of long end-to-end tests (cmd/ragent: most of them wait on Redis,
# Postgres, leases and streams, not on the CPU) takes a fraction of its serial
# time. Every test is isolated already (its own database, key prefix, index
# and ports: internal/testenv), which is what makes the processes safe side
# by side.
#
#   scripts/testshards.sh BIN DIR SHARDS TIMEOUT [test binary flags...]
#
# BIN is a binary from `go test -c`, run in DIR (the package's directory, for
# its relative paths). Tests are dealt round-robin in name order, so that a
# family of similar tests (TestChat…) spreads over the shards. Each shard's
# events go to $SHARD_DIR/shard-N.json (go tool test2json), its stderr to
# shard-N.err; at the end (with jq: scripts/services.sh start tools) it
# prints one line per shard (passed, failed, skipped by name: under
# RAGENT_REQUIRE_SERVICES only the gated ones should skip), the output of every failed test and of the
# package (a panic, a timeout), the slowest tests and, last, each failed
# test's file:line messages. Exits non-zero when a shard fails.
set -euo pipefail

(($# >= 4)) || {
	echo "usage: $0 BIN DIR SHARDS TIMEOUT [test binary flags...]" >&2
	exit 2
}
bin=$(realpath "$1") dir=$2 shards=$3 timeout=$4
shift 4
readonly SHARD_DIR=${SHARD_DIR:-$(dirname "$bin")/shards}
mkdir -p "$SHARD_DIR"
rm -f "$SHARD_DIR"/shard-*

mapfile -t tests < <(cd "$dir" && "$bin" -test.list '.*' | grep '^Test' | sort)
((${#tests[@]} > 0)) || {
	echo "testshards: $bin lists no tests" >&2
	exit 1
}

declare -a runs pids
for ((i = 0; i < ${#tests[@]}; i++)); do
	runs[i % shards]+="${runs[i % shards]:+|}${tests[i]}"
done
started=$SECONDS
for ((s = 0; s < shards; s++)); do
	[[ -n ${runs[s]:-} ]] || continue
	(cd "$dir" && exec go tool test2json -t -p "shard-$s" "$bin" -test.v=test2json -test.count=1 \
		-test.timeout="$timeout" -test.run "^(${runs[s]})\$" "$@") >"$SHARD_DIR/shard-$s.json" 2>"$SHARD_DIR/shard-$s.err" &
	pids[s]=$!
done

failed=0
for s in "${!pids[@]}"; do
	if wait "${pids[s]}"; then status=ok; else status=FAIL failed=1; fi
	file=$SHARD_DIR/shard-$s.json
	count() { jq -s --arg a "$1" '[.[] | select(.Test and (.Test | contains("/") | not) and .Action == $a)] | length' "$file" 2>/dev/null || echo '?'; }
	skipped=$(jq -rs '[.[] | select(.Test and (.Test | contains("/") | not) and .Action == "skip") | .Test] | join(" ")' "$file" 2>/dev/null || true)
	printf 'testshards: shard %d %s: %s tests passed, %s failed, %s skipped%s, %ss\n' "$s" "$status" \
		"$(count pass)" "$(count fail)" "$(count skip)" "${skipped:+ ($skipped)}" \
		"$(jq -rs '[.[] | select(.Test == null and (.Action == "pass" or .Action == "fail"))][0].Elapsed // "?"' "$file" 2>/dev/null || echo '?')"
	if [[ $status == FAIL ]]; then
		# The output of each failed test and of the package itself (a
		# panic, a timeout with its running tests), then the binary's stderr.
		jq -js '
			(map(select(.Test and .Action == "fail") | .Test)) as $failed |
			.[] | select(.Output and (.Test == null or (.Test as $t | $failed | index($t)))) | .Output
		' "$file" | sed "s/^/shard-$s: /"
		sed "s/^/shard-$s stderr: /" "$SHARD_DIR/shard-$s.err"
	fi
done
echo "testshards: $((SECONDS - started))s for ${#tests[@]} tests in $shards shards; the slowest:"
jq -rs '[.[] | select(.Test and (.Test | contains("/") | not) and (.Action == "pass" or .Action == "fail"))]
	| sort_by(-.Elapsed) | .[:12][] | "  \(.Elapsed)s \(.Test) (\(.Package))"' "$SHARD_DIR"/shard-*.json 2>/dev/null || true
if ((failed)); then
	# Last, where a log cut to its tail still shows them: each failed test
	# that has no failed subtest, with its last 20 file:line messages (the
	# reason, which the output above can bury under a long test's log).
	echo "testshards: the failures:"
	jq -rs '
		(map(select(.Test and .Action == "fail") | .Test) | unique) as $failed |
		($failed | map(. as $t | select($failed | any(startswith($t + "/")) | not))) as $leaves |
		. as $events | $leaves[] as $t |
		"  --- FAIL: \($t)",
		([$events[] | select(.Test == $t and .Output and (.Output | test("^ +[^ ]+\\.go:[0-9]+: "))) | "  " + (.Output | rtrimstr("\n"))] | .[-20:][])
	' "$SHARD_DIR"/shard-*.json 2>/dev/null || true
fi
exit "$failed"
