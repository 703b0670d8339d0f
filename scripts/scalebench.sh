#!/usr/bin/env bash
# Retrieval at scale: generates synthetic corpora, bulk-loads each size into
# a database of its own, times keyword, vector and hybrid search in-process
# and over HTTP /search, ingests documents through the real pipeline at each
# size, times the same queries in tantivy, and prints a markdown table.
#
#   scripts/scalebench.sh                       # English-like, 10k 50k 200k
#   SIZES="10000 50000 200000 1000000" LANGS="en zh" scripts/scalebench.sh
#   BACKEND="postgres opensearch" SIZES=200000 scripts/scalebench.sh
#
# Knobs (environment): BACKEND, the search backends to run one after the
# other on the same corpus and queries (RAGENT_SEARCH_BACKEND of the ragent
# under test: postgres, opensearch or both; default postgres; opensearch
# starts the node of `scripts/services.sh start opensearch` and indexes under
# a prefix of its own, deleted at the end), SIZES, LANGS (en zh), QUERIES per size (200), INGEST
# documents through the pipeline after each size (1000), DIM of the offline
# embedder (64: HNSW builds at 512 dimensions do not fit a 2-core machine at
# 1M chunks), SEED (1), KEEP_DB=1 to keep the database, PROFILE=1 to record
# a Go CPU profile and the database's wait events during each pipeline run,
# GROWTH passes (5; 0 for none) of the smallest and the largest size's
# keyword queries, alternating pass by pass after the largest size, over a
# second knowledge base holding the smallest size's corpus (the growth ratio
# in one window),
# SCALEBENCH_DATABASE_URL to run on another Postgres server than the one
# scripts/services.sh starts (any database of it: the run makes its own).
# Work files (corpora, per-size queries, raw JSON results) go under
# SCALEBENCH_DIR, by default ${XDG_CACHE_HOME:-$HOME/.cache}/ragent/scalebench:
# give two runs at once different ones. The database
# ragent_scale_<pid> is dropped at the end, and so are the OpenSearch indexes
# scale<pid>_* (both kept with KEEP_DB=1). Run one at a time: a large load
# uses both cores for many minutes.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
SIZES=${SIZES:-10000 50000 200000}
LANGS=${LANGS:-en}
QUERIES=${QUERIES:-200}
INGEST=${INGEST:-1000}
DIM=${DIM:-64}
SEED=${SEED:-1}
GROWTH=${GROWTH:-5}
BACKEND=${BACKEND:-postgres}
for b in $BACKEND; do
	[[ $b == postgres || $b == opensearch ]] || { echo "scalebench: BACKEND $b: postgres or opensearch" >&2; exit 2; }
done
CACHE_ROOT=${RAGENT_SERVICES_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/ragent}
WORK=${SCALEBENCH_DIR:-$CACHE_ROOT/scalebench}
mkdir -p "$WORK"

services="redis tantivy"
# Another Postgres server (say, one with other settings): its ragent role
# may create databases and template1 has pgvector.
[[ -n ${SCALEBENCH_DATABASE_URL:-} ]] || services="postgres $services"
[[ " $BACKEND " != *" opensearch "* ]] || services+=" opensearch"
# shellcheck disable=SC2086 # a list of names
eval "$(bash scripts/services.sh start $services)"
[[ -z ${SCALEBENCH_DATABASE_URL:-} ]] || RAGENT_DATABASE_URL=$SCALEBENCH_DATABASE_URL
go build -o bin/ragent ./cmd/ragent

max_size=0
for s in $SIZES; do ((s > max_size)) && max_size=$s; done
sizes_csv=$(tr ' ' ',' <<<"$SIZES")
db=ragent_scale_$$
admin_url="${RAGENT_DATABASE_URL%/*}/postgres?sslmode=disable&options=-c%20client_min_messages%3Dwarning"
run_url=${RAGENT_DATABASE_URL%/*}/$db?sslmode=disable
drop_db() { [[ -n ${KEEP_DB:-} ]] || psql -q "$admin_url" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null; }
# ragent names its OpenSearch indexes PREFIX_v<time> behind the alias PREFIX.
os_prefix=scale$$
drop_indexes() {
	[[ -z ${KEEP_DB:-} && -n ${RAGENT_OPENSEARCH_URL:-} ]] || return 0
	curl -fsS -m 60 -X DELETE "$RAGENT_OPENSEARCH_URL/${os_prefix}_*" >/dev/null || true
}
trap 'drop_db; drop_indexes' EXIT
load() { echo "$(date -u '+%H:%M:%S') load average $(cut -d' ' -f1-3 /proc/loadavg): $*" | tee -a "$WORK/machine.txt" >&2; }

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
	qdir=$WORK/queries-$lang
	mkdir -p "$qdir"
	for backend in $BACKEND; do
		drop_db
		psql -q "$admin_url" -c "CREATE DATABASE $db" >/dev/null
		load "ragent $lang $backend starts"
		RAGENT_DATABASE_URL=$run_url RAGENT_REDIS_PREFIX="scale$$:" RAGENT_DEMO=false RAGENT_LOG_LEVEL=warn \
			RAGENT_SEARCH_BACKEND=$backend RAGENT_OPENSEARCH_INDEX="${os_prefix}_$lang" \
			RAGENT_EMBEDDING_PROVIDER=offline RAGENT_EMBEDDING_DIM=$DIM RAGENT_ADMIN_PASSWORD="scale-$$-$RANDOM$RANDOM" \
			./bin/ragent scalebench run --lang "$lang" --seed "$SEED" --sizes "$sizes_csv" --queries "$QUERIES" \
			--ingest "$INGEST" --growth-passes "$GROWTH" --queries-dir "$qdir" ${PROFILE:+--profile-dir "$WORK"} >"$WORK/ragent-$lang-$backend.jsonl"
		load "ragent $lang $backend done"
		if [[ $backend == opensearch ]]; then
			# What the engine holds for the largest size: primary store bytes and documents.
			curl -fsS -m 30 "$RAGENT_OPENSEARCH_URL/_cat/indices/${os_prefix}_${lang}_*?bytes=b&h=index,docs.count,pri.store.size" |
				tee "$WORK/opensearch-$lang.txt" >&2
		fi
		drop_db
	done
	load "tantivy $lang starts"
	"$RAGENT_TANTIVY_PYTHON" scripts/scalebench_tantivy.py "$lang" "$corpus/corpus.jsonl" "$qdir" $SIZES >"$WORK/tantivy-$lang.jsonl"
	load "tantivy $lang done"
done
echo "finished: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$WORK/machine.txt" >&2

python3 - "$WORK" "$BACKEND" $LANGS <<'EOF'
import json, sys
work, backends, langs = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
def rows(path):
    return {r["size"]: r for r in map(json.loads, open(path))}
print("| corpus | backend | chunks | keyword p50 / p99 | keyword /search p50 / p99 | vector p50 / p99 | hybrid p50 / p99 | /search hybrid p50 (× store) | tantivy p50 / p99 | keyword / tantivy p50 | ingest chunks/s | DB bytes/chunk | keyword bytes/posting | load chunks/s, searchable after, HNSW build, keyword settle |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for lang in langs:
    peer = rows(f"{work}/tantivy-{lang}.jsonl")
    for backend in backends:
        ours = rows(f"{work}/ragent-{lang}-{backend}.jsonl")
        for size, r in sorted(ours.items()):
            L, t = r["latency"], peer.get(size, {})
            s = lambda m, p="store": f'{L[m][p]["p50_ms"]:.1f} / {L[m][p]["p99_ms"]:.1f} ms'
            ratio = L["keyword"]["store"]["p50_ms"] / t["p50_ms"] if t.get("p50_ms") else float("nan")
            http = L["hybrid"]["http"]["p50_ms"]
            ingest = f'{r["ingest_chunks_per_s"]:.0f}' if r["ingest_chunks"] else "–"
            print(f'| {lang} {size:,} | {backend} | {r["chunks"]:,} | {s("keyword")} | {s("keyword", "http")} | {s("vector")} | {s("hybrid")} | '
                  f'{http:.1f} ms ({http / L["hybrid"]["store"]["p50_ms"]:.2f}×) | '
                  f'{t.get("p50_ms", float("nan")):.2f} / {t.get("p99_ms", float("nan")):.2f} ms | {ratio:.0f}× | {ingest} | '
                  f'{r["db_bytes_per_chunk"]:,.0f} | {r["keyword_bytes_per_posting"]:.0f} | '
                  f'{r["load_chunks_per_s"]:,.0f}, {r.get("sync_seconds", 0):.0f} s, {r["hnsw_seconds"]:.0f} s, {r.get("settle_seconds", 0):.0f} s |')
growth = [(lang, backend, rows(f"{work}/ragent-{lang}-{backend}.jsonl")) for lang in langs for backend in backends]
growth = [(lang, backend, rs) for lang, backend, rs in growth if rs[max(rs)].get("growth")]
if growth:
    print()
    print("| corpus | backend | keyword p50, each size in its turn | growth | keyword p50 / p99, side by side | growth, side by side |")
    print("|---|---|---|---|---|---|")
    for lang, backend, rs in growth:
        lo, hi = rs[min(rs)], rs[max(rs)]
        g = hi["growth"]
        a, b = lo["latency"]["keyword"]["store"]["p50_ms"], hi["latency"]["keyword"]["store"]["p50_ms"]
        print(f'| {lang} {lo["size"]:,} → {hi["size"]:,} | {backend} | {a:.2f} → {b:.2f} ms | {b / a:.1f}× | '
              f'{g["baseline"]["p50_ms"]:.2f} / {g["baseline"]["p99_ms"]:.1f} → {g["largest"]["p50_ms"]:.2f} / {g["largest"]["p99_ms"]:.1f} ms '
              f'({g["passes"]} passes) | {g["ratio"]:.1f}× |')
if "postgres" in backends and "opensearch" in backends:
    print()
    print("| corpus | opensearch / postgres keyword /search p50 | p99 | hit@10 postgres / opensearch |")
    print("|---|---|---|---|")
    for lang in langs:
        pg, os_ = rows(f"{work}/ragent-{lang}-postgres.jsonl"), rows(f"{work}/ragent-{lang}-opensearch.jsonl")
        for size in sorted(set(pg) & set(os_)):
            a, b = pg[size]["latency"]["keyword"]["http"], os_[size]["latency"]["keyword"]["http"]
            print(f'| {lang} {size:,} | {b["p50_ms"] / a["p50_ms"]:.2f}× | {b["p99_ms"] / a["p99_ms"]:.2f}× | {a["hit10"]:.2f} / {b["hit10"]:.2f} |')
EOF
