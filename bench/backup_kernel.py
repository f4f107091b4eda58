"""A real JupyterLab kernel's `1+1` round trip with no backup, then while restic backs the
workspace up (a first backup into a new repository, at nice 19 / idle I/O as the server runs it).

usage: backup_kernel.py WORKSPACE SCRATCH   (run by bench/backups.sh with the tools' Python)
Prints: quiet and during-backup p50 / p95 in ms, the samples, and the ratio of each.
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_client import Kernel  # noqa: E402

WS, SCRATCH = sys.argv[1], sys.argv[2]
TOKEN = "bench-backup-kernel"
LOW = ["ionice", "-c", "3", "nice", "-n", "19"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port, path, method="GET"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 headers={"Authorization": f"token {TOKEN}"}, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def timed(kernel):
    t0 = time.perf_counter()
    assert kernel.execute("1+1") == "2"
    return (time.perf_counter() - t0) * 1000


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    port = free_port()
    lab = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "jupyter-lab"), "--no-browser", "--allow-root",
         f"--port={port}", "--ip=127.0.0.1", f"--ServerApp.root_dir={WS}",
         f"--IdentityProvider.token={TOKEN}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(600):
            try:
                api(port, "/api/status")
                break
            except OSError:
                time.sleep(0.1)
        kernel_id = api(port, "/api/kernels", "POST")["id"]
        kernel = Kernel(f"ws://127.0.0.1:{port}/api/kernels/{kernel_id}/channels?token={TOKEN}", [])
        for _ in range(30):
            timed(kernel)
        quiet = [timed(kernel) for _ in range(300)]
        env = dict(os.environ, RESTIC_REPOSITORY=os.path.join(SCRATCH, "kernel-repo"))
        subprocess.run(LOW + ["restic", "-q", "init", "--repository-version", "2"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        backup = subprocess.Popen(LOW + ["restic", "--cache-dir", os.path.join(SCRATCH, "kernel-cache"), "-q",
                                         "backup", "--one-file-system", "."], cwd=WS, env=env,
                                  stdout=subprocess.DEVNULL)
        t0 = time.perf_counter()
        busy = []
        while backup.poll() is None:
            busy.append(timed(kernel))
        backup_s = time.perf_counter() - t0
        assert backup.returncode == 0, "the backup failed"
        kernel.close()
    finally:
        os.killpg(lab.pid, 9)
    q50, q95, b50, b95 = pct(quiet, 50), pct(quiet, 95), pct(busy, 50), pct(busy, 95)
    print(f"kernel 1+1, no backup      p50 {q50:.2f} ms  p95 {q95:.2f} ms  ({len(quiet)} runs)")
    print(f"kernel 1+1, during backup  p50 {b50:.2f} ms  p95 {b95:.2f} ms  ({len(busy)} runs in the {backup_s:.1f} s backup)")
    print(f"ratio during / without     p50 {b50 / q50:.2f}x  p95 {b95 / q95:.2f}x  (mean {statistics.mean(busy) / statistics.mean(quiet):.2f}x)")


if __name__ == "__main__":
    main()
