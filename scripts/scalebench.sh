#!/usr/bin/env bash
# Retrieval at scale: generates synthetic corpora, bulk-loads each size into
# a database of its own, times keyword, vector and hybrid search in-process
# and over HTTP /search, ingests documents through the real pipeline at each
# size, times the same queries in tantivy, and prints a markdown table.
#
#   scripts/scalebench.sh                       # English-like, 10k 50k 200k
#   SIZES="10000 50000 200000 1000000" LANGS="en zh" scripts/scalebench.sh
#
# Knobs (environment): SIZES, LANGS (en zh), QUERIES per size (200), INGEST
# documents through the pipeline after each size (1000), DIM of the offline
# embedder (64: HNSW builds at 512 dimensions do not fit a 2-core machine at
# 1M chunks), SEED (1), KEEP_DB=1 to keep the database, PROFILE=1 to record
# a Go CPU profile and the database's wait events during each pipeline run,
# SCALEBENCH_DATABASE_URL to run on another Postgres server than the one
# scripts/services.sh starts (any database of it: the run makes its own).
# Work files (corpora, per-size queries, raw JSON results) go under
# SCALEBENCH_DIR, by default ${XDG_CACHE_HOME:-$HOME/.cache}/ragent/scalebench:
# give two runs at once different ones. The database
# ragent_scale_<pid> is dropped at the end. Run one at a time: a large load
# uses both cores for many minutes.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
SIZES=${SIZES:-10000 50000 200000}
LANGS=${LANGS:-en}
QUERIES=${QUERIES:-200}
INGEST=${INGEST:-1000}
DIM=${DIM:-64}
SEED=${SEED:-1}
CACHE_ROOT=${RAGENT_SERVICES_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/ragent}
WORK=${SCALEBENCH_DIR:-$CACHE_ROOT/scalebench}
mkdir -p "$WORK"

if [[ -n ${SCALEBENCH_DATABASE_URL:-} ]]; then
	# Another Postgres server (say, one with other settings): its ragent
	# role may create databases and template1 has pgvector.
	eval "$(bash scripts/services.sh start redis tantivy)"
	RAGENT_DATABASE_URL=$SCALEBENCH_DATABASE_URL
else
	eval "$(bash scripts/services.sh start postgres redis tantivy)"
fi
go build -o bin/ragent ./cmd/ragent

max_size=0
for s in $SIZES; do ((s > max_size)) && max_size=$s; done
sizes_csv=$(tr ' ' ',' <<<"$SIZES")
db=ragent_scale_$$
admin_url="${RAGENT_DATABASE_URL%/*}/postgres?sslmode=disable&options=-c%20client_min_messages%3Dwarning"
run_url=${RAGENT_DATABASE_URL%/*}/$db?sslmode=disable
drop_db() { [[ -n ${KEEP_DB:-} ]] || psql -q "$admin_url" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null; }
trap drop_db EXIT

{
	echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(uname -r)"
	echo "started: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "commit: $(git describe --always --dirty)"
} | tee "$WORK/machine.txt" >&2

for lang in $LANGS; do
	# Named after the generator's last commit: a changed generator makes a new corpus.
	corpus=$WORK/$lang-$SEED-$max_size-$(git log -1 --format=%h -- internal/scalebench 2>/dev/null || echo dev)
	if [[ ! -s $corpus/corpus.jsonl ]]; then
		echo "scalebench: generating $corpus" >&2
		./bin/ragent scalebench gen --lang "$lang" --seed "$SEED" --docs "$max_size" --queries "$QUERIES" --out "$corpus"
	fi
	drop_db
	psql -q "$admin_url" -c "CREATE DATABASE $db" >/dev/null
	qdir=$WORK/queries-$lang
	mkdir -p "$qdir"
	RAGENT_DATABASE_URL=$run_url RAGENT_REDIS_PREFIX="scale$$:" RAGENT_DEMO=false RAGENT_LOG_LEVEL=warn \
		RAGENT_EMBEDDING_PROVIDER=offline RAGENT_EMBEDDING_DIM=$DIM RAGENT_ADMIN_PASSWORD="scale-$$-$RANDOM$RANDOM" \
		./bin/ragent scalebench run --lang "$lang" --seed "$SEED" --sizes "$sizes_csv" --queries "$QUERIES" \
		--ingest "$INGEST" --queries-dir "$qdir" ${PROFILE:+--profile-dir "$WORK"} >"$WORK/ragent-$lang.jsonl"
	drop_db
	"$RAGENT_TANTIVY_PYTHON" scripts/scalebench_tantivy.py "$lang" "$corpus/corpus.jsonl" "$qdir" $SIZES >"$WORK/tantivy-$lang.jsonl"
done
echo "finished: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$WORK/machine.txt" >&2

python3 - "$WORK" $LANGS <<'EOF'
import json, sys
work, langs = sys.argv[1], sys.argv[2:]
def rows(path):
    return {r["size"]: r for r in map(json.loads, open(path))}
print("| corpus | chunks | keyword p50 / p99 | vector p50 / p99 | hybrid p50 / p99 | /search hybrid p50 (× store) | tantivy p50 / p99 | keyword / tantivy p50 | ingest chunks/s | DB bytes/chunk | keyword bytes/posting | load chunks/s, HNSW build, keyword settle |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for lang in langs:
    ours, peer = rows(f"{work}/ragent-{lang}.jsonl"), rows(f"{work}/tantivy-{lang}.jsonl")
    for size, r in sorted(ours.items()):
        L, t = r["latency"], peer.get(size, {})
        s = lambda m: f'{L[m]["store"]["p50_ms"]:.1f} / {L[m]["store"]["p99_ms"]:.1f} ms'
        ratio = L["keyword"]["store"]["p50_ms"] / t["p50_ms"] if t.get("p50_ms") else float("nan")
        http = L["hybrid"]["http"]["p50_ms"]
        ingest = f'{r["ingest_chunks_per_s"]:.0f}' if r["ingest_chunks"] else "–"
        print(f'| {lang} {size:,} | {r["chunks"]:,} | {s("keyword")} | {s("vector")} | {s("hybrid")} | '
              f'{http:.1f} ms ({http / L["hybrid"]["store"]["p50_ms"]:.2f}×) | '
              f'{t.get("p50_ms", float("nan")):.2f} / {t.get("p99_ms", float("nan")):.2f} ms | {ratio:.0f}× | {ingest} | '
              f'{r["db_bytes_per_chunk"]:,.0f} | {r["keyword_bytes_per_posting"]:.0f} | '
              f'{r["load_chunks_per_s"]:,.0f}, {r["hnsw_seconds"]:.0f} s, {r.get("settle_seconds", 0):.0f} s |')
EOF
