"""Instructions per proxied request, counted by valgrind's callgrind: our server against nginx as
a reverse proxy, in front of the same nginx stand-in, over the same keep-alive connections.

Instruction counts do not move with the machine's load (the other benchmarks' ratios do), so
this tells a change to the proxy's own code apart from noise. They count user space only: the
kernel's share (the sockets, waking the peer) is the same for both and is not in them.

  SERVER_BIN=target/release/server TOOLS=... BENCH_OUT=/tmp/instr python3 bench/instructions.py
  INSTR_REQUESTS=20000 (per target)   INSTR_TOP=25 (functions listed, inclusive)

Prints instructions per request for each, and the costliest functions of ours (inclusive).
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from bench import LOGS, WORK, NginxProxy, Server  # noqa: E402

REQUESTS = int(os.environ.get("INSTR_REQUESTS", 20000))
TOP = int(os.environ.get("INSTR_TOP", 25))
CONNECTIONS = 4


def callgrind(out):
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]


def load(url, token, requests):
    """`requests` GETs over CONNECTIONS keep-alive connections (a small fixed count, not a
    duration, so both targets do the same work)."""
    per = requests // CONNECTIONS
    script = os.path.join(WORK, "load.py")
    with open(script, "w") as f:
        f.write(LOAD)
    subprocess.run([sys.executable, script, url, token, str(CONNECTIONS), str(per)], check=True,
                   timeout=1800)
    return per * CONNECTIONS


LOAD = r'''
import http.client, sys, threading, urllib.parse
url, token, conns, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
u = urllib.parse.urlsplit(url)
def run():
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    for _ in range(per):
        c.request("GET", u.path, headers={"Authorization": "Bearer " + token})
        r = c.getresponse()
        body = r.read()
        assert r.status == 200 and len(body) == 1024, (r.status, len(body))
threads = [threading.Thread(target=run) for _ in range(conns)]
[t.start() for t in threads]
[t.join() for t in threads]
'''


def counted(pid, out, url, token):
    """Instructions the process at `pid` executes while serving REQUESTS requests."""
    load(url, token, 400)  # warm-up: connections, pools, caches
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True)
    served = load(url, token, REQUESTS)
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "-d", "measured", str(pid)], check=True,
                   capture_output=True)
    time.sleep(1)
    dumps = sorted(p for p in os.listdir(os.path.dirname(out))
                   if p.startswith(os.path.basename(out)) and p != os.path.basename(out))
    path = os.path.join(os.path.dirname(out), dumps[-1])
    total = 0
    with open(path) as f:
        for line in f:
            m = re.match(r"(?:summary|totals):\s+(\d+)", line)
            if m:
                total = int(m.group(1))
    return total / served, path


def main():
    os.makedirs(LOGS, exist_ok=True)
    # Unsandboxed: nginx reaches the stand-in directly too (as in bench.py's stand-in parts).
    standin = {"SANDBOX_EDITORS__JUPYTERLAB": os.path.join(bench.HERE, "standins/nginx-editor.sh"),
               "SANDBOX_LOCAL__ISOLATION": "none"}
    ours_out = os.path.join(WORK, "callgrind.ours")
    server = proxy = None
    try:
        server = Server("instr", standin)
        # Instrumented only while the measured requests run (callgrind_control -i on / off).
        server.wrapper = callgrind(ours_out)
        server.start()
        sid = server.launch("jupyterlab")["id"]
        server.wait_session(sid, "api/status", timeout=120)
        upstream = server.standin(sid)
        ours, ours_dump = counted(server.proc.pid, ours_out,
                                  f"http://127.0.0.1:{server.port}/s/{sid}/1k", server.token)

        # nginx as a reverse proxy, one process (no master) so that callgrind sees the one serving.
        nginx_out = os.path.join(WORK, "callgrind.nginx")
        sock = upstream["socket"]
        web = f"unix:{sock}" if sock else f"127.0.0.1:{upstream['port']}"
        proxy = NginxProxy(sid, web, [], wrapper=callgrind(nginx_out), single_process=True)
        floor, _ = counted(proxy.proc.pid, nginx_out,
                           f"http://127.0.0.1:{proxy.port}/s/{sid}/1k", server.token)

        print(f"instructions per proxied request ({REQUESTS} requests, {CONNECTIONS} keep-alive "
              f"connections, user space only)")
        print(f"  ours               {ours:10.0f}")
        print(f"  nginx as a proxy   {floor:10.0f}")
        print(f"  ours / nginx       {ours / floor:10.2f}")
        annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", ours_dump],
                                   capture_output=True, text=True).stdout
        rows = [line for line in annotated.splitlines() if re.match(r"\s*[\d,]+ \(", line)]
        print(f"\nours, inclusive, per request (top {TOP}):")
        for row in rows[1:TOP + 1]:
            count, rest = row.strip().split(" ", 1)
            per = int(count.replace(",", "")) / REQUESTS
            name = rest.split(")", 1)[1].strip() if ")" in rest else rest
            print(f"  {per:9.0f}  {name[:150]}")
    finally:
        if proxy is not None:
            proxy.stop()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
