"""Executes `1+1` in real Jupyter kernels over their WebSocket channels, several targets in turn.

usage: kernel_client.py SPEC_JSON
  SPEC_JSON = {"n": 500, "block": 50,
               "targets": [{"label": "ours", "url": "ws://…/api/kernels/<id>/channels",
                            "headers": [["k", "v"]], "pids": [1234]}, …]}

One connection per target; the targets take turns in blocks of `block` executions until each has
had n. An execution is the kernel protocol's usual exchange: one execute_request on the shell
channel, then everything the kernel sends back (status busy, execute_input, execute_result,
execute_reply, status idle) until both the reply and the idle status have come. That is several
messages from the editor for each one from the browser, and the kernel takes milliseconds to
answer: traffic unlike an echo's, where busy polling mostly misses and backs off.

For each target, the CPU time of the processes in `pids` (user + system, all threads) is summed
over that target's blocks only, so it is the relay's cost per execution plus the server's
background work in the same time.
Prints JSON: per label n, median_us, p99_us, mean_us, cpu_us_per_exec.
"""
import contextlib
import json
import statistics
import sys
import time
import uuid

import psutil
from websockets.sync.client import connect


def cpu_s(pids):
    total = 0.0
    for pid in pids:
        t = psutil.Process(pid).cpu_times()
        total += t.user + t.system
    return total


class Kernel:
    def __init__(self, url, headers):
        self.stack = contextlib.ExitStack()
        self.ws = self.stack.enter_context(connect(url, additional_headers=[tuple(h) for h in headers],
                                                   compression=None, open_timeout=30, max_size=None))
        self.session = uuid.uuid4().hex

    def execute(self, code="1+1"):
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "username": "bench", "session": self.session,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
        }))
        replied = idle = False
        result = None
        while not (replied and idle):
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "execute_reply":
                replied = True
                if msg["content"].get("status") != "ok":
                    raise RuntimeError(f"execution failed: {msg['content']}")
            elif kind == "execute_result":
                result = msg["content"]["data"]["text/plain"]
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
        return result

    def close(self):
        self.stack.close()


def main():
    spec = json.loads(sys.argv[1])
    n, block = spec["n"], spec.get("block", 50)
    runs = []
    try:
        for t in spec["targets"]:
            runs.append({"target": t, "kernel": Kernel(t["url"], t.get("headers", [])),
                         "us": [], "cpu_s": 0.0})
        for run in runs:  # warm-up, not counted; and the answer is checked once
            for _ in range(20):
                if run["kernel"].execute() != "2":
                    raise RuntimeError(f"{run['target']['label']}: 1+1 is not 2 there")
        while len(runs[0]["us"]) < n:
            for run in runs:
                kernel, pids = run["kernel"], run["target"]["pids"]
                c0 = cpu_s(pids)
                for _ in range(min(block, n - len(run["us"]))):
                    t0 = time.perf_counter_ns()
                    kernel.execute()
                    run["us"].append((time.perf_counter_ns() - t0) / 1000)
                run["cpu_s"] += cpu_s(pids) - c0
    finally:
        for run in runs:
            run["kernel"].close()
    out = {}
    for run in runs:
        s = sorted(run["us"])
        out[run["target"]["label"]] = {
            "n": n, "median_us": statistics.median(s), "p99_us": s[int(0.99 * n) - 1],
            "mean_us": statistics.mean(s), "cpu_us_per_exec": run["cpu_s"] / n * 1e6}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
