"""A/B of the proxy's HTTP path: several server variants side by side, each with its own nginx
stand-in session, `wrk -t2 -c64` rotating over them and the stand-in reached directly.

  SERVER_BIN=... TOOLS=... BENCH_OUT=/tmp/ab BENCH_PYTHON=... \
  AB_VARIANTS='[{"name":"a","bin":"/path/server"},{"name":"b","bin":"/path/server","env":{"TOKIO_WORKER_THREADS":"1"}}]' \
  python3 bench/ab_http.py            # AB_ROUNDS=6 AB_DUR=5s

Prints req/s, ratio to direct and the server's CPU per request per round, then medians and each
variant's ratio to the first, paired by round (the machine's state moves between rounds).
"""
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from bench import Server, cpu_s, parse_wrk  # noqa: E402

VARIANTS = json.loads(os.environ["AB_VARIANTS"])
ROUNDS = int(os.environ.get("AB_ROUNDS", 6))
DUR = os.environ.get("AB_DUR", "5s")


class Variant(Server):
    """A server of its own binary (bench.Server runs the one in SERVER_BIN)."""

    def __init__(self, name, binary, env):
        self.binary = binary
        super().__init__(name, env)

    def cli(self, *args, **kwargs):
        bench.SERVER_BIN = self.binary
        return Server.cli(self, *args, **kwargs)

    def start(self):
        bench.SERVER_BIN = self.binary
        return Server.start(self)


def main():
    os.makedirs(bench.LOGS, exist_ok=True)
    standin = {"SANDBOX_EDITORS__JUPYTERLAB": os.path.join(bench.HERE, "standins/nginx-editor.sh")}
    servers, targets = [], {}
    try:
        for v in VARIANTS:
            server = Variant(v["name"], v["bin"], dict(standin, **v.get("env", {}))).start()
            servers.append(server)
            sid = server.launch("jupyterlab")["id"]
            server.wait_session(sid, "api/status", timeout=60)
            targets[v["name"]] = (f"http://127.0.0.1:{server.port}/s/{sid}/1k", server)
            if "direct" not in targets:
                nginx = server.standin(sid)
                targets["direct"] = (f"http://127.0.0.1:{nginx['port']}/s/{sid}/1k", None)

        def wrk(label, duration):
            url, server = targets[label]
            token = (server or servers[0]).token
            before = cpu_s(server.proc.pid) if server else 0.0
            p = subprocess.run(["wrk", "-t2", "-c64", f"-d{duration}", "--latency",
                                "-H", f"Authorization: Bearer {token}", url],
                               capture_output=True, text=True, check=True)
            result = parse_wrk(p.stdout)
            used = cpu_s(server.proc.pid) - before if server else 0.0
            result["cpu_us"] = used / result["requests"] * 1e6 if server else 0.0
            return result

        labels = list(targets)
        for label in labels:
            wrk(label, "2s")  # warm-up, not counted
        runs = {label: [] for label in labels}
        for rnd in range(ROUNDS):
            shift = rnd % len(labels)
            for label in labels[shift:] + labels[:shift]:
                runs[label].append(wrk(label, DUR))
            print(f"round {rnd + 1}: " + "  ".join(
                f"{label} {runs[label][-1]['rps']:.0f} ({runs[label][-1]['cpu_us']:.1f} us)"
                for label in labels), flush=True)
        for label in labels:
            ratio = [a["rps"] / d["rps"] for a, d in zip(runs[label], runs["direct"])]
            print(f"{label:12s} req/s median {statistics.median(r['rps'] for r in runs[label]):.0f}"
                  f"  /direct median {statistics.median(ratio):.3f} ({', '.join(f'{x:.2f}' for x in ratio)})"
                  f"  CPU/request median {statistics.median(r['cpu_us'] for r in runs[label]):.1f} us")
        base = VARIANTS[0]["name"]
        for v in VARIANTS[1:]:
            paired = [a["rps"] / b["rps"] for a, b in zip(runs[v["name"]], runs[base])]
            print(f"{v['name']}/{base} by round: {', '.join(f'{x:.3f}' for x in paired)}"
                  f"  median {statistics.median(paired):.3f}")
    finally:
        for server in servers:
            try:
                server.stop()
            except Exception as e:  # noqa: BLE001 - report and stop the others
                print(f"stopping {server.name}: {e}")


if __name__ == "__main__":
    main()
