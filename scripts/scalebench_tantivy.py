"""The peer engine of scripts/scalebench.sh: the same corpus prefix and the
same queries in tantivy, timed in-process (query parsing and top-10 search,
after one untimed pass), one JSON line per size on stdout.

    python scalebench_tantivy.py LANG CORPUS.jsonl QUERIES_DIR SIZE...

English-like text goes through tantivy's en_stem analyzer (lower case,
Snowball stemming), as ragent lower-cases and Porter-stems. Chinese-like
text is given as the overlapping character bigrams ragent indexes, so both
engines score the same terms.
"""

import json
import re
import sys
import time

import tantivy

CJK_RUN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")


def bigrams(text):
    out = []
    for run in CJK_RUN.findall(text):
        if len(run) == 1:
            out.append(run)
        out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return " ".join(out)


def percentile(sorted_ms, p):
    i = max(0, min(len(sorted_ms) - 1, int(p * len(sorted_ms) + 0.999999) - 1))
    return sorted_ms[i]


def main():
    lang, corpus_path, queries_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    sizes = [int(s) for s in sys.argv[4:]]
    prep = bigrams if lang == "zh" else (lambda t: t)
    analyzer = "default" if lang == "zh" else "en_stem"
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", stored=False, tokenizer_name=analyzer)
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    schema = builder.build()
    index = tantivy.Index(schema)  # in memory
    writer = index.writer(heap_size=256_000_000, num_threads=2)
    indexed = 0
    with open(corpus_path, encoding="utf-8") as corpus:
        for size in sizes:
            start = time.perf_counter()
            while indexed < size:
                line = corpus.readline()
                if not line:
                    raise SystemExit(f"corpus has only {indexed} documents, need {size}")
                doc = json.loads(line)
                writer.add_document(tantivy.Document(id=doc["_id"], text=prep(doc["text"])))
                indexed += 1
            writer.commit()
            writer.wait_merging_threads()
            writer = index.writer(heap_size=256_000_000, num_threads=2)
            index.reload()
            index_s = time.perf_counter() - start
            searcher = index.searcher()
            with open(f"{queries_dir}/queries-{size}.jsonl", encoding="utf-8") as f:
                queries = [prep(json.loads(line)["text"]) for line in f]
            for q in queries:  # warm-up, as ragent's side does
                searcher.search(index.parse_query(q, ["text"]), 10)
            lat = []
            for q in queries:
                t = time.perf_counter()
                searcher.search(index.parse_query(q, ["text"]), 10)
                lat.append((time.perf_counter() - t) * 1000)
            lat.sort()
            print(json.dumps({"size": size, "queries": len(queries), "index_seconds": round(index_s, 2),
                              "p50_ms": round(percentile(lat, 0.5), 4), "p99_ms": round(percentile(lat, 0.99), 4)}),
                  flush=True)


if __name__ == "__main__":
    main()
