"""GET /health on a kept-alive connection and on a new one per call, per port: shows the 40 ms
Nagle / delayed-ACK stall of a server that writes headers and body in two sends.

python3 health.py 8765,8766
"""
import time, sys, http.client
for p in [int(x) for x in sys.argv[1].split(",")]:
  for ka in (True, False):
    ts=[]; c=http.client.HTTPConnection("127.0.0.1",p)
    for i in range(20):
      if not ka: c=http.client.HTTPConnection("127.0.0.1",p)
      t=time.perf_counter(); c.request("GET","/health"); r=c.getresponse(); r.read(); ts.append((time.perf_counter()-t)*1e3)
      if not ka: c.close()
    ts.sort(); print(p, "keepalive" if ka else "new-conn", "GET /health p50 %.2f ms min %.2f max %.2f"%(ts[10],ts[0],ts[-1]))
