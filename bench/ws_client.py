"""Sequential 100-byte WebSocket echo round trips against several targets at once, interleaved.

usage: ws_client.py SPEC_JSON
  SPEC_JSON = {"n": 2000, "block": 100, "targets": [{"label": "direct", "url": "ws://…", "headers": [["k", "v"]]}, …]}

One connection per target; the targets take turns in blocks of `block` (default 100) round trips
(100 direct, 100 ours, 100 CHP, 100 direct, …) until each has had n, so a change in the machine's
load hits all targets alike, while each block keeps its path warm as a sequential run would.
Each round trip is one send and one receive on one connection; nothing is in flight elsewhere.
Prints JSON: per label n, median_us, p99_us, min_us, max_us, mean_us.
"""
import json
import statistics
import sys
import time

from websockets.sync.client import connect

spec = json.loads(sys.argv[1])
n = spec["n"]
msg = "x" * 100
conns = []
try:
    for t in spec["targets"]:
        ws = connect(t["url"], additional_headers=[tuple(h) for h in t.get("headers", [])],
                     compression=None, open_timeout=10)
        conns.append((t["label"], ws, []))
    for _ in range(100):  # warm-up, not counted
        for _, ws, _ in conns:
            ws.send(msg)
            ws.recv()
    block = spec.get("block", 100)
    while len(conns[0][2]) < n:
        for _, ws, rtt in conns:
            for _ in range(min(block, n - len(rtt))):
                t0 = time.perf_counter_ns()
                ws.send(msg)
                reply = ws.recv()
                rtt.append((time.perf_counter_ns() - t0) / 1000)
                assert reply == msg
finally:
    for _, ws, _ in conns:
        ws.close()
out = {}
for label, _, rtt in conns:
    s = sorted(rtt)
    out[label] = {"n": n, "median_us": statistics.median(s), "p99_us": s[int(0.99 * n) - 1],
                  "min_us": s[0], "max_us": s[-1], "mean_us": statistics.mean(s)}
print(json.dumps(out))
