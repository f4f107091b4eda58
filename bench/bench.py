"""The project's benchmark: launch latency, proxy throughput, WebSocket round trips, memory.

Run through bench/run.sh (it builds the server, finds the editors and CHP, exports the variables
below). Everything listens on 127.0.0.1; every process started here is stopped by PID (editors
through the API, or by their process group, which is their own PID) before it returns.

Environment (set by run.sh):
  SERVER_BIN     the release binary          TOOLS      the editors (venv/, npm/)
  CHP_BIN        configurable-http-proxy     BENCH_OUT  where results and logs go
  BENCH_PYTHON   a Python with websockets, psutil (the stand-in WebSocket editor uses it)
  HUB_VENV       JupyterHub 6.1.1 + JupyterLab, spawned beside the warm launches (empty: skipped)
Knobs: BENCH_ONLY=cold,memory,http,ws,kernel,warm,sandbox,signin,faults,crowd  BENCH_SANDBOX_N=8  BENCH_SIGNIN_N=40
       BENCH_FAULTS_READY=100  BENCH_FAULTS_STRANDED=50 (faults; its outage part needs DATABASE_URL=postgres://…)
       BENCH_BASELINE_BIN (an earlier release binary, for signin)  BENCH_COLD_N=10  BENCH_CS_N (code-server; default
BENCH_COLD_N)  BENCH_ROUNDS=3 (HTTP)  BENCH_WRK_DUR=10s  BENCH_WS_ROUNDS=9  BENCH_WS_N=2000
       BENCH_WS_BLOCK=100  BENCH_KERNEL_N=500  BENCH_KERNEL_ROUNDS=4
       BENCH_NGINX_PROXY=1 (nginx as a reverse proxy: the floor for any proxy here)
"""
import http.client
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER_BIN = os.environ["SERVER_BIN"]
TOOLS = os.environ["TOOLS"]
CHP_BIN = os.environ.get("CHP_BIN", "")
OUT = os.environ["BENCH_OUT"]
WORK = os.path.join(OUT, "work")
LOGS = os.path.join(OUT, "logs")
ONLY = set(os.environ.get("BENCH_ONLY", "cold,memory,http,ws,kernel").split(","))
COLD_N = int(os.environ.get("BENCH_COLD_N", 10))
CS_N = int(os.environ.get("BENCH_CS_N", COLD_N))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 3))
WRK_DUR = os.environ.get("BENCH_WRK_DUR", "10s")
WS_N = int(os.environ.get("BENCH_WS_N", 2000))
WS_BLOCK = int(os.environ.get("BENCH_WS_BLOCK", 100))
WS_ROUNDS = int(os.environ.get("BENCH_WS_ROUNDS", 9))
WS_CLIENTS = ["raw", "websockets"]
KERNEL_N = int(os.environ.get("BENCH_KERNEL_N", 500))
KERNEL_ROUNDS = int(os.environ.get("BENCH_KERNEL_ROUNDS", 4))
FLOOR = os.environ.get("BENCH_NGINX_PROXY", "1") == "1"
SLICE = 8192
# JupyterHub beside the warm launches (run.sh installs it); empty: without it.
HUB_VENV = os.environ.get("HUB_VENV", "")

PROGRAMS = {
    "jupyterlab": os.path.join(TOOLS, "venv/bin/jupyter-lab"),
    "marimo": os.path.join(TOOLS, "venv/bin/marimo"),
    "code-server": os.path.join(TOOLS, "npm/node_modules/.bin/code-server"),
}


def log(msg):
    print(msg, flush=True)


def now():
    return time.perf_counter()


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def med(values):
    return statistics.median(values) if values else float("nan")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (an editor's `editor.sock`)."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def http_get(port, path, headers=None, method="GET", body=None, timeout=10):
    """One request on a fresh connection: (status, body bytes). `port` may be a socket's path."""
    if isinstance(port, str):
        conn = UnixHTTPConnection(port, timeout)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        hdrs = dict(headers or {})
        data = None
        if isinstance(body, bytes):
            data = body
        elif body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def wait_200(port, path, headers=None, timeout=180, interval=0.01, check=None):
    """Polls until HTTP 200; returns perf_counter() at success. `check()` (every 0.5 s) may raise."""
    start = now()
    last, last_check = None, start
    while True:
        try:
            status, _ = http_get(port, path, headers, timeout=5)
            if status == 200:
                return now()
            last = status
        except OSError as e:
            last = type(e).__name__
        t = now()
        if t - start > timeout:
            raise TimeoutError(f"{port}{path} not 200 after {timeout} s (last: {last})")
        if check and t - last_check > 0.5:
            last_check = t
            check()
        time.sleep(interval)


def rss_mib(pid):
    return psutil.Process(pid).memory_info().rss / 2**20


def hwm_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


def cpu_s(*pids):
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def stop_group(proc, grace=5.0):
    """Stops a process we started with process_group=0 the way the local runtime does: SIGTERM to
    its group, up to `grace` seconds for it to exit, then SIGKILL to whatever is left of the group."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def clean_env():
    """Our environment without SANDBOX_* settings that would override the bench's configuration."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_")}


# ---------------------------------------------------------------------------------------------
# The product server


class Server:
    def __init__(self, name, editor_env=None, warm="[]", extra=""):
        self.name = name
        self.dir = os.path.join(WORK, name)
        os.makedirs(os.path.join(self.dir, "data"), exist_ok=True)
        # Editors' Unix sockets live in the data directory, and a socket's path has room for 107
        # bytes: the server sees the data directory through a short link.
        self.data = os.path.join("/tmp", f"gsb-bench-{os.getpid()}-{name}")
        if os.path.lexists(self.data):
            os.unlink(self.data)
        os.symlink(os.path.join(self.dir, "data"), self.data)
        self.port = free_port()
        self.config = os.path.join(self.dir, "config.toml")
        with open(self.config, "w") as f:
            f.write(f"""listen = "127.0.0.1:{self.port}"
data_dir = "{self.data}"
site_root = "{self.dir}/site"

[credits]
initial_grant = "100000"

[sessions]
ready_timeout_seconds = 180

# One benchmark user runs many sessions at once (the memory part has 10 ready).
[quotas]
max_sessions = 100
max_gpu_mib = 10000000

[editors]
tools_dir = "{TOOLS}"

[pool]
detect_nvidia = false
warm = {warm}

[[pool.gpus]]
name = "virtual-0"
model = "Virtual"
memory_mib = 98304
slice_mib = {SLICE}
{extra}
""")
        self.env = clean_env()
        self.env.update(editor_env or {})
        # (SANDBOX_LOG is left out: the config loader reads it as an unknown key `log` and refuses
        # to start; the default filter is info,sqlx=warn,tower_sessions=warn)
        self.proc = None
        self.token = None
        # A command `serve` runs under (valgrind, for bench/instructions.py).
        self.wrapper = ()
        # The binary: ours, or an earlier build beside it (BENCH_BASELINE_BIN).
        self.bin = SERVER_BIN

    def cli(self, *args, stdin=None):
        p = subprocess.run([self.bin, "--config", self.config, *args], env=self.env,
                           input=stdin, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"server {' '.join(args)}: {p.stderr.strip()}")
        return p.stdout.strip()

    def start(self):
        self.cli("user", "add", "bench", "--password-stdin", stdin="bench-password\n")
        self.token = self.cli("token", "create", "--user", "bench").splitlines()[-1].strip()
        self.logf = open(os.path.join(LOGS, f"server-{self.name}.log"), "w")
        self.proc = subprocess.Popen([*self.wrapper, self.bin, "--config", self.config, "serve"], env=self.env,
                                     stdout=self.logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, process_group=0)
        self.auth = {"Authorization": f"Bearer {self.token}"}

        def check():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited at start (see {self.logf.name})")
        wait_200(self.port, "/api/v1/me", self.auth, timeout=120 if self.wrapper else 60, check=check)
        return self

    def kill9(self):
        """The server killed as a crash would kill it; its editors keep running."""
        self.proc.kill()
        self.proc.wait()
        self.logf.close()

    def respawn(self):
        """`serve` again on the same configuration and data (after `kill9`); returns when the
        process has started, not when it answers."""
        self.logf = open(os.path.join(LOGS, f"server-{self.name}.log"), "a")
        self.proc = subprocess.Popen([*self.wrapper, self.bin, "--config", self.config, "serve"], env=self.env,
                                     stdout=self.logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, process_group=0)

    def api(self, method, path, body=None, ok=(200, 201)):
        status, data = http_get(self.port, "/api/v1" + path, self.auth, method, body, timeout=60)
        if status not in ok:
            raise RuntimeError(f"{method} {path} -> {status} {data[:300]!r}")
        return json.loads(data) if data else None

    def launch(self, editor, minutes=15):
        return self.api("POST", "/sessions",
                        {"editor": editor, "slice_mib": SLICE, "duration_minutes": minutes})

    def check_alive(self, sid):
        view = self.api("GET", f"/sessions/{sid}")
        if view["state"] == "ended":
            raise RuntimeError(f"session {sid} ended: {view.get('detail')}")

    def wait_session(self, sid, path, timeout=180):
        return wait_200(self.port, f"/s/{sid}/{path}", self.auth, timeout,
                        check=lambda: self.check_alive(sid))

    def stop_session(self, sid):
        view = self.api("DELETE", f"/sessions/{sid}")
        if view["state"] != "ended":
            raise RuntimeError(f"session {sid} is {view['state']} after DELETE")

    def editor_pids(self):
        return [c.pid for c in psutil.Process(self.proc.pid).children()
                if c.status() != psutil.STATUS_ZOMBIE]

    def standin(self, sid):
        """The stand-in editor's port and PID (it writes them into its run directory)."""
        path = os.path.join(self.data, "run", sid, "standin.json")
        with open(path) as f:
            return json.load(f)

    def stop(self):
        if self.proc is None:
            return
        leftovers = []
        try:
            for view in self.api("GET", "/sessions"):
                if view["state"] != "ended":
                    self.stop_session(view["id"])
            leftovers = psutil.Process(self.proc.pid).children(recursive=True)
        except Exception as e:  # the server may be gone already
            log(f"  (stopping {self.name}: {e})")
        self.proc.send_signal(signal.SIGTERM)  # stop_on_shutdown stops any editor still running
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for p in leftovers:  # by PID, should anything have outlived the server
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    log(f"  leftover editor process {p.pid}; stopping it")
                    p.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc = None
        self.logf.close()
        # Workspaces are file systems of their own (as root): unmounted, deepest first, so the
        # scratch directory can be removed and no loop device is left behind.
        real = os.path.realpath(self.data)
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f if line.split()[4].startswith(real + "/")]
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
        if os.path.islink(self.data):
            os.unlink(self.data)


# ---------------------------------------------------------------------------------------------
# 1. Cold launch: through the product vs the editor started directly


def mirror_arguments(editor, listen, base, workspace):
    """server/src/editors.rs::arguments, mirrored; checked against the product's real command line
    during the warm-up (a difference is reported). `listen` is a port, or a socket's path for the
    editors that the local runtime puts on one (JupyterLab, code-server)."""
    if editor == "jupyterlab":
        where = ([f"--ServerApp.sock={listen}", "--ServerApp.sock_mode=0600"] if isinstance(listen, str)
                 else ["--ip=127.0.0.1", f"--port={listen}", "--port-retries=0"])
        return ["--no-browser", *where, f"--ServerApp.base_url={base}",
                f"--ServerApp.root_dir={workspace}", "--ServerApp.allow_root=True",
                "--ServerApp.allow_remote_access=True", "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if editor == "marimo":
        return ["edit", "--headless", "--host=127.0.0.1", f"--port={listen}",
                f"--base-url={base.rstrip('/')}", "--token-password-file=-",
                "--skip-update-check", "--allow-origins=*", workspace]
    where = ([f"--socket={listen}", "--socket-mode=600"] if isinstance(listen, str)
             else [f"--bind-addr=127.0.0.1:{listen}"])
    return [*where, "--auth=password", "--disable-telemetry",
            "--disable-update-check", "--disable-workspace-trust",
            "--disable-getting-started-override", workspace]


# editors.rs::listens_on_unix_socket
SOCKET_EDITORS = {"jupyterlab", "code-server"}


def mirror_secret_env(editor, secret):
    """editors.rs::secret_env (the secret never goes on the command line)."""
    return {"jupyterlab": {"JUPYTER_TOKEN": secret}, "code-server": {"HASHED_PASSWORD": secret},
            "marimo": {}}[editor]


# editors.rs::INHERITED_ENV: all an editor sees of the server's environment
INHERITED_ENV = ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "SHELL"]


def readiness_path(editor, base):
    return {"jupyterlab": f"{base}api/status", "marimo": f"{base}health",
            "code-server": "/healthz"}[editor]


def proxied_path(editor):
    """Below /s/<id>/: the same readiness path as seen through our proxy."""
    return {"jupyterlab": "api/status", "marimo": "health", "code-server": "healthz"}[editor]


def editor_auth(editor, secret):
    return {"jupyterlab": {"Authorization": f"token {secret}"},
            "marimo": {"Authorization": f"Bearer {secret}"},
            "code-server": {"Cookie": f"code-server-session={secret}"}}[editor]


def normalize(args):
    out = []
    for a in args:
        a = re.sub(r"^(--port=|--bind-addr=127\.0\.0\.1:)\d+$", r"\1PORT", a)
        a = re.sub(r"^(--ServerApp\.sock=|--socket=)/.*", r"\1SOCKET", a)
        a = re.sub(r"^(--ServerApp\.base_url=|--base-url=)/s/[^/]+", r"\1/s/ID", a)
        a = re.sub(r"^(--ServerApp\.root_dir=)/.*", r"\1WORKSPACE", a)
        if a.startswith("/") and os.path.isdir(a):
            a = "WORKSPACE"
        out.append(a)
    return out


class Direct:
    """The editor alone: the same program, arguments and environment as the local runtime gives it."""

    def __init__(self):
        self.dir = os.path.join(WORK, "direct")
        self.workspace = os.path.join(self.dir, "workspace")
        os.makedirs(self.workspace, exist_ok=True)
        self.count = 0
        # Sockets as the local runtime makes them, under a path short enough for one.
        self.sockets = tempfile.mkdtemp(prefix="gsb-direct-")

    def start_and_wait(self, editor):
        self.count += 1
        port = (os.path.join(self.sockets, f"{self.count}.sock") if editor in SOCKET_EDITORS
                else free_port())
        sid = f"direct-{self.count:04d}-{secrets.token_hex(8)}"  # any id: only the base path uses it
        base = f"/s/{sid}/"
        run_dir = os.path.join(self.dir, "run", sid)
        token = secrets.token_hex(24)
        secret = token
        if editor == "code-server":  # the runtime hashes it (editors.rs::code_server_hash)
            from argon2 import PasswordHasher
            secret = PasswordHasher(time_cost=1, memory_cost=64, parallelism=1).hash(token)
        # the runtime clears the environment and passes on only these
        env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
        env.update(HOME=self.workspace, JUPYTER_RUNTIME_DIR=os.path.join(run_dir, "jupyter"),
                   XDG_CACHE_HOME=os.path.join(run_dir, "cache"),
                   XDG_DATA_HOME=os.path.join(self.workspace, ".local/share"),
                   XDG_CONFIG_HOME=os.path.join(self.workspace, ".config"),
                   PYTHONUNBUFFERED="1", SANDBOX_GPU_MODEL="Virtual", SANDBOX_SLICE_MIB=str(SLICE),
                   CUDA_VISIBLE_DEVICES="")
        env.update(mirror_secret_env(editor, secret))
        os.makedirs(run_dir)
        self.last_env_keys = sorted(env)
        args = mirror_arguments(editor, port, base, self.workspace)
        stdin_secret = editor == "marimo"  # editors.rs::secret_stdin: marimo reads its token there
        logf = open(os.path.join(LOGS, f"direct-{editor}.log"), "a")
        t0 = now()
        p = subprocess.Popen([PROGRAMS[editor], *args], cwd=self.workspace, env=env,
                             stdin=subprocess.PIPE if stdin_secret else subprocess.DEVNULL,
                             stdout=logf, stderr=subprocess.STDOUT, process_group=0)
        if stdin_secret:
            p.stdin.write(f"{secret}\n".encode())
            p.stdin.close()

        def check():
            if p.poll() is not None:
                raise RuntimeError(f"{editor} exited with {p.returncode} (see {logf.name})")
        try:
            t1 = wait_200(port, readiness_path(editor, base), editor_auth(editor, secret), check=check)
        finally:
            s0 = now()
            stop_group(p)
            stop_s = now() - s0
            logf.close()
        return {"s": t1 - t0, "stop_s": stop_s}


def ours_start_and_wait(server, editor, capture_args=False):
    t0 = now()
    view = server.launch(editor)
    sid = view["id"]
    t1 = server.wait_session(sid, proxied_path(editor))
    res = {"s": t1 - t0}
    view = server.api("GET", f"/sessions/{sid}")
    created = view["created_at_ms"]
    res["steps_ms"] = [(st["state"], st["message"], st["at_ms"] - created) for st in view["steps"]]
    res["ready_ms"] = next((ms for state, _, ms in res["steps_ms"] if state == "ready"), None)
    if capture_args:
        pids = server.editor_pids()
        res["cmdline"] = psutil.Process(pids[0]).cmdline() if pids else []
        res["env_keys"] = sorted(psutil.Process(pids[0]).environ()) if pids else []
    s0 = now()
    server.stop_session(sid)
    res["stop_s"] = now() - s0
    return res


def spawn_ms(run):
    starting = next(ms for state, msg, ms in run["steps_ms"] if msg.startswith("Starting "))
    waiting = next(ms for state, msg, ms in run["steps_ms"] if msg.startswith("Waiting for "))
    return waiting - starting


def bench_cold(results):
    avail = {e: p for e, p in PROGRAMS.items() if os.path.exists(p)}
    for e in PROGRAMS:
        if e not in avail:
            log(f"  {e}: not installed at {PROGRAMS[e]}; skipped")
    server = Server("cold").start()
    direct = Direct()
    out = {"n": {}, "runs": {e: {"ours": [], "direct": []} for e in avail}, "warmup": {},
           "args_check": {}, "load_start": loadavg()}
    try:
        # Warm-up (not counted): fills each workspace and the page cache alike for both sides,
        # and checks that the direct runs use the product's real command line.
        for editor in avail:
            ours = ours_start_and_wait(server, editor, capture_args=True)
            d = direct.start_and_wait(editor)
            out["warmup"][editor] = {"ours_s": ours["s"], "direct_s": d["s"]}
            real = normalize(ours["cmdline"])
            listen = "/x.sock" if editor in SOCKET_EDITORS else 1
            mirror = normalize(mirror_arguments(editor, listen, "/s/x/", direct.workspace))
            same = real[-len(mirror):] == mirror
            same_env = ours["env_keys"] == direct.last_env_keys
            out["args_check"][editor] = {"same": same, "product": ours["cmdline"], "same_env": same_env,
                                         "product_env": ours["env_keys"], "direct_env": direct.last_env_keys}
            log(f"  warm-up {editor:12s} ours {ours['s']:.3f} s, direct {d['s']:.3f} s; "
                f"arguments {'match' if same else 'DIFFER: ' + ' '.join(real)}; "
                f"environment names {'match' if same_env else 'DIFFER: ' + ' '.join(ours['env_keys'])}")
        rounds = max(COLD_N, CS_N)
        for i in range(rounds):
            for editor in avail:
                n = CS_N if editor == "code-server" else COLD_N
                if i >= n:
                    continue
                order = ("ours", "direct") if i % 2 == 0 else ("direct", "ours")
                for side in order:
                    r = ours_start_and_wait(server, editor) if side == "ours" else direct.start_and_wait(editor)
                    r["load"] = loadavg()
                    out["runs"][editor][side].append(r)
                    time.sleep(0.3)
                o, d = out["runs"][editor]["ours"][-1]["s"], out["runs"][editor]["direct"][-1]["s"]
                log(f"  run {i + 1:2d} {editor:12s} ours {o:.3f} s  direct {d:.3f} s  diff {o - d:+.3f} s  (load {loadavg()})")
    finally:
        server.stop()
        shutil.rmtree(direct.sockets, ignore_errors=True)
    out["load_end"] = loadavg()
    summary = {}
    for editor, runs in out["runs"].items():
        o = [r["s"] for r in runs["ours"]]
        d = [r["s"] for r in runs["direct"]]
        summary[editor] = {
            "n": len(o), "ours_median_s": med(o), "direct_median_s": med(d),
            "diff_of_medians_s": med(o) - med(d),
            "median_pair_diff_s": med([a - b for a, b in zip(o, d)]),
            "ours_min_s": min(o), "ours_max_s": max(o), "direct_min_s": min(d), "direct_max_s": max(d),
            "stop_median_s": med([r["stop_s"] for r in runs["ours"]]),
            "direct_stop_median_s": med([r["stop_s"] for r in runs["direct"]]),
            # server clock: session created -> marked ready (the rest of "ours" is the POST itself
            # and our 10 ms poll through the proxy)
            "server_ready_median_ms": med([r["ready_ms"] for r in runs["ours"] if r["ready_ms"] is not None]),
            # server clock: "Starting <editor>" -> "Waiting for <editor>": the runtime's start()
            # (directories, log file, secret, spawn)
            "spawn_median_ms": med([spawn_ms(r) for r in runs["ours"]]),
            # client clock minus server clock: the POST before `created` plus the time from
            # `ready` to our first 200 through the proxy
            "post_and_detect_median_ms": med([r["s"] * 1000 - r["ready_ms"] for r in runs["ours"]]),
        }
    out["summary"] = summary
    results["cold"] = out


# ---------------------------------------------------------------------------------------------
# 2-4. Stand-in editors: memory, HTTP throughput, WebSocket round trips


def parse_wrk(text):
    unit = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0}

    def ms(tok):
        m = re.match(r"([0-9.]+)(us|ms|s|m)$", tok)
        return float(m.group(1)) * unit[m.group(2)] if m else None
    res = {}
    m = re.search(r"Requests/sec:\s+([0-9.]+)", text)
    res["rps"] = float(m.group(1)) if m else None
    m = re.search(r"(\d+) requests in", text)
    res["requests"] = int(m.group(1)) if m else None
    for p in ("50", "75", "90", "99"):
        m = re.search(rf"^\s+{p}(?:\.000)?%\s+(\S+)", text, re.M)
        res[f"p{p}_ms"] = ms(m.group(1)) if m else None
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    res["non2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: (.*)", text)
    res["socket_errors"] = m.group(1).strip() if m else None
    return res


class Chp:
    def __init__(self):
        self.port, self.api_port = free_port(), free_port()
        self.token = secrets.token_hex(32)
        self.logf = open(os.path.join(LOGS, "chp.log"), "w")
        env = dict(clean_env(), CONFIGPROXY_AUTH_TOKEN=self.token)
        self.proc = subprocess.Popen([CHP_BIN, "--ip", "127.0.0.1", "--port", str(self.port),
                                      "--api-ip", "127.0.0.1", "--api-port", str(self.api_port)],
                                     env=env, stdout=self.logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, process_group=0)
        wait_200(self.api_port, "/api/routes", {"Authorization": f"token {self.token}"}, timeout=60)

    def add_route(self, prefix, target):
        status, body = http_get(self.api_port, f"/api/routes{prefix}",
                                {"Authorization": f"token {self.token}"}, "POST", {"target": target})
        assert status == 201, (status, body)

    def stop(self):
        stop_group(self.proc)
        self.logf.close()


class NginxProxy:
    """A floor for any reverse proxy on this machine: nginx (1 worker, upstream keep-alive) in front
    of the same two stand-ins, without auth or routing logic."""

    def __init__(self, web_sid, web_upstream, ws_routes, wrapper=(), single_process=False):
        """ws_routes: (session id, upstream address) pairs relayed as WebSocket. wrapper: a
        command nginx runs under (valgrind); single_process: no master, so that the wrapper
        sees the process that serves."""
        self.port = free_port()
        d = os.path.join(WORK, "nginx-proxy")
        os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
        user = "user root;" if os.getuid() == 0 else ""
        ws = "".join(f"""
    location /s/{sid}/ {{
      proxy_pass http://ws{i}; proxy_http_version 1.1; proxy_buffering off;
      proxy_set_header Host $host; proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection "upgrade";
    }}""" for i, (sid, _) in enumerate(ws_routes))
        ws_up = " ".join(f"upstream ws{i} {{ server {up}; }}" for i, (_, up) in enumerate(ws_routes))
        master = "master_process off;" if single_process else ""
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(f"""{user}
{master}
worker_processes 1;
pid {d}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path {d}/tmp/body; proxy_temp_path {d}/tmp/proxy; fastcgi_temp_path {d}/tmp/fcgi;
  uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;
  upstream web {{ server {web_upstream}; keepalive 128; keepalive_requests 1000000; }}
  {ws_up}
  server {{
    listen 127.0.0.1:{self.port};
    location /s/{web_sid}/ {{
      proxy_pass http://web; proxy_http_version 1.1;
      proxy_set_header Host $host; proxy_set_header Connection "";
    }}{ws}
  }}
}}
""")
        self.logf = open(os.path.join(LOGS, "nginx-proxy.log"), "w")
        self.proc = subprocess.Popen([*wrapper, "nginx", "-e", "stderr", "-p", d, "-c", f"{d}/nginx.conf",
                                      "-g", "daemon off;"],
                                     stdout=self.logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     process_group=0)
        wait_200(self.port, f"/s/{web_sid}/api/status", timeout=60 if wrapper else 20)

    def workers(self):
        return [c.pid for c in psutil.Process(self.proc.pid).children()]

    def stop(self):
        stop_group(self.proc)
        self.logf.close()


def bench_standins(results):
    # The runtime gives an editor only PATH, LANG and a few more of our variables, so the
    # WebSocket stand-in's Python is written into a small launcher here.
    os.makedirs(os.path.join(WORK, "bin"), exist_ok=True)
    ws_editor = os.path.join(WORK, "bin", "ws-editor")
    with open(ws_editor, "w") as f:
        f.write(f'#!/bin/sh\nexec "{os.environ["BENCH_PYTHON"]}" "{HERE}/standins/ws_editor.py" "$@"\n')
    os.chmod(ws_editor, 0o755)
    # The echo stands in for marimo (TCP to the editor) and for code-server (a Unix socket, as
    # JupyterLab's kernels also use).
    # Unsandboxed: the stand-ins are reached directly too (their port and socket), which a
    # sandbox's own network and files would hide; the proxy's path is the same either way.
    env = {"SANDBOX_EDITORS__JUPYTERLAB": os.path.join(HERE, "standins/nginx-editor.sh"),
           "SANDBOX_EDITORS__MARIMO": ws_editor, "SANDBOX_EDITORS__CODE_SERVER": ws_editor,
           "SANDBOX_LOCAL__ISOLATION": "none"}
    server = Server("standins", env).start()
    chp = floor = unpolled_server = None
    try:
        pid = server.proc.pid
        # --- 4. memory: idle, then with 10 ready sessions
        if "memory" in ONLY:
            server.api("GET", "/me")
            time.sleep(2)
            mem = {"idle_rss_mib": rss_mib(pid)}
            sids = []
            for _ in range(10):
                sid = server.launch("jupyterlab")["id"]
                server.wait_session(sid, "api/status", timeout=60)
                st, body = http_get(server.port, f"/s/{sid}/1k", server.auth)
                assert st == 200 and len(body) == 1024, (st, len(body))
                sids.append(sid)
            time.sleep(2)
            mem["ten_sessions_rss_mib"] = rss_mib(pid)
            mem["ten_sessions_hwm_mib"] = hwm_mib(pid)
            mem["threads"] = psutil.Process(pid).num_threads()
            results["memory"] = mem
            log(f"  server RSS idle {mem['idle_rss_mib']:.1f} MiB; with 10 ready sessions "
                f"{mem['ten_sessions_rss_mib']:.1f} MiB (peak {mem['ten_sessions_hwm_mib']:.1f} MiB)")
            web_sid = sids[0]
        else:
            web_sid = server.launch("jupyterlab")["id"]
            server.wait_session(web_sid, "api/status", timeout=60)
        ws_sid = ws_sock_sid = None
        if "ws" in ONLY:
            ws_sid = server.launch("marimo")["id"]
            server.wait_session(ws_sid, "health", timeout=60)
            ws_sock_sid = server.launch("code-server")["id"]
            server.wait_session(ws_sock_sid, "healthz", timeout=60)
            assert server.standin(ws_sock_sid)["socket"], "the code-server stand-in listens on a socket"
            # The same proxy with WebSocket busy polling off (on by default, 100 us), side by
            # side: what the polling buys.
            unpolled_server = Server("standins-unpolled",
                                     dict(env, SANDBOX_PROXY__WEBSOCKET_BUSY_POLL_US="0")).start()
            unpolled_sid = unpolled_server.launch("marimo")["id"]
            unpolled_server.wait_session(unpolled_sid, "health", timeout=60)
            unpolled_sock_sid = unpolled_server.launch("code-server")["id"]
            unpolled_server.wait_session(unpolled_sock_sid, "healthz", timeout=60)
        nginx = server.standin(web_sid)
        echo = server.standin(ws_sid) if ws_sid else None
        if ("http" in ONLY or "ws" in ONLY) and CHP_BIN:
            chp = Chp()
            results["chp_idle_rss_mib"] = rss_mib(chp.proc.pid)
            chp.add_route(f"/s/{web_sid}", f"http://127.0.0.1:{nginx['port']}")
            if echo:
                chp.add_route(f"/s/{ws_sid}", f"http://127.0.0.1:{echo['port']}")
        if ONLY & {"http", "ws"} and FLOOR:
            # Its upstreams are ours: the stand-in's socket for HTTP; for WebSocket, marimo's port
            # and code-server's socket.
            web_upstream = f"unix:{nginx['socket']}" if nginx.get("socket") else f"127.0.0.1:{nginx['port']}"
            ws_routes = []
            if echo:
                ws_routes = [(ws_sid, f"127.0.0.1:{echo['port']}"),
                             (ws_sock_sid, f"unix:{server.standin(ws_sock_sid)['socket']}")]
            floor = NginxProxy(web_sid, web_upstream, ws_routes)

        # --- 2. HTTP throughput: wrk direct vs ours vs CHP (vs nginx as a proxy), same nginx
        if "http" in ONLY:
            nginx_workers = [c.pid for c in psutil.Process(nginx["pid"]).children()]
            path = f"/s/{web_sid}/1k"
            targets = {"direct": f"http://127.0.0.1:{nginx['port']}{path}",
                       "ours": f"http://127.0.0.1:{server.port}{path}"}
            if chp:
                targets["chp"] = f"http://127.0.0.1:{chp.port}{path}"
            if floor:
                targets["nginx-proxy"] = f"http://127.0.0.1:{floor.port}{path}"
            procs = {"ours": [pid], "chp": [chp.proc.pid] if chp else [], "direct": [],
                     "nginx-proxy": floor.workers() if floor else []}
            hdr = server.auth
            for label, url in targets.items():
                port = int(url.split(":")[2].split("/")[0])
                st, body = http_get(port, path, hdr)
                assert st == 200 and len(body) == 1024, (label, st, len(body))

            def wrk(label, duration):
                cmd = ["wrk", "-t2", "-c64", f"-d{duration}", "--latency",
                       "-H", f"Authorization: Bearer {server.token}", targets[label]]
                c0, n0 = cpu_s(*procs[label]), cpu_s(*nginx_workers)
                p = subprocess.run(cmd, capture_output=True, text=True)
                r = parse_wrk(p.stdout)
                if r["requests"]:
                    r["proxy_cpu_us_per_req"] = (cpu_s(*procs[label]) - c0) / r["requests"] * 1e6 if procs[label] else None
                    r["nginx_cpu_us_per_req"] = (cpu_s(*nginx_workers) - n0) / r["requests"] * 1e6
                return r, cmd

            labels = list(targets)
            for label in labels:  # warm-up, not counted (CHP's JIT, connection pools)
                wrk(label, "2s")
            runs = []
            for rnd in range(ROUNDS):
                for k in range(len(labels)):
                    label = labels[(rnd + k) % len(labels)]  # rotate the order each round
                    r, cmd = wrk(label, WRK_DUR)
                    r.update(label=label, round=rnd + 1, load=loadavg())
                    runs.append(r)
                    log(f"  wrk round {rnd + 1} {label:11s} {r['rps']:9.0f} req/s  p50 {r['p50_ms']:.2f} ms  "
                        f"p99 {r['p99_ms']:.2f} ms  non-2xx {r['non2xx']}  errors {r['socket_errors']}  (load {r['load']})")
                    time.sleep(1)
            summ = {}
            for label in labels:
                rr = [r for r in runs if r["label"] == label]
                summ[label] = {"rps": med([r["rps"] for r in rr]), "p50_ms": med([r["p50_ms"] for r in rr]),
                               "p99_ms": med([r["p99_ms"] for r in rr]),
                               "rps_all": [r["rps"] for r in rr],
                               "non2xx": sum(r["non2xx"] for r in rr)}
                if label != "direct":
                    summ[label]["proxy_cpu_us_per_req"] = med([r["proxy_cpu_us_per_req"] for r in rr])
            by_round = {(r["round"], r["label"]): r["rps"] for r in runs}
            for label in labels:
                if label != "direct":
                    summ[label]["over_direct_per_round"] = [by_round[(i, label)] / by_round[(i, "direct")]
                                                            for i in range(1, ROUNDS + 1)]
            summ["ours_over_direct_per_round"] = summ["ours"]["over_direct_per_round"]
            if chp:
                summ["ours_over_chp_per_round"] = [by_round[(i, "ours")] / by_round[(i, "chp")]
                                                   for i in range(1, ROUNDS + 1)]
            results["http"] = {"runs": runs, "summary": summ,
                               "cmd": " ".join(cmd[:-2]) + " 'Authorization: Bearer <token>' URL"}
            results["after_http_rss_mib"] = rss_mib(pid)

        # --- 3. WebSocket round trips: direct vs ours vs CHP (vs nginx as a proxy), interleaved,
        # by two clients (see ws_client.py): our raw one, and the peer benchmark's.
        if "ws" in ONLY:
            wpath = f"/s/{ws_sid}/ws"
            spath = f"/s/{ws_sock_sid}/ws"
            bearer = [["Authorization", f"Bearer {server.token}"]]
            targets = [{"label": "direct", "url": f"ws://127.0.0.1:{echo['port']}{wpath}"},
                       {"label": "ours", "url": f"ws://127.0.0.1:{server.port}{wpath}", "headers": bearer},
                       {"label": "ours-socket", "url": f"ws://127.0.0.1:{server.port}{spath}",
                        "headers": bearer},
                       {"label": "unpolled", "headers": [["Authorization", f"Bearer {unpolled_server.token}"]],
                        "url": f"ws://127.0.0.1:{unpolled_server.port}/s/{unpolled_sid}/ws"},
                       {"label": "unpolled-socket", "headers": [["Authorization", f"Bearer {unpolled_server.token}"]],
                        "url": f"ws://127.0.0.1:{unpolled_server.port}/s/{unpolled_sock_sid}/ws"}]
            if chp:
                targets.append({"label": "chp", "url": f"ws://127.0.0.1:{chp.port}{wpath}"})
            if floor:
                targets.append({"label": "nginx-proxy", "url": f"ws://127.0.0.1:{floor.port}{wpath}"})
                targets.append({"label": "nginx-socket", "url": f"ws://127.0.0.1:{floor.port}{spath}"})
            labels = [t["label"] for t in targets]
            # Each proxy relays two of the targets (TCP and socket); its CPU time over a client's
            # run (user + system of the whole process, exited threads included), divided by the
            # round trips it relayed, is its CPU per round trip. The server's own background work
            # in that time (a tick every few seconds) is counted too, a small overstatement.
            relays = {"ours": [pid], "unpolled": [unpolled_server.proc.pid]}
            if floor:
                relays["nginx-proxy"] = floor.workers()
            relay_s = dict.fromkeys(relays, 0.0)
            relayed = 0
            # A new order of the targets every round (seeded: the same in every run), so that
            # no target always follows the same neighbour.
            order = random.Random(20261130)
            runs = []
            for rnd in range(WS_ROUNDS):
                shuffled = order.sample(targets, len(targets))
                # The clients alternate which goes first: a client's run can leave the machine
                # warmer for the next.
                for client in WS_CLIENTS[rnd % 2:] + WS_CLIENTS[:rnd % 2]:
                    spec = {"n": WS_N, "block": WS_BLOCK, "client": client, "targets": shuffled}
                    before = {name: cpu_s(*pids) for name, pids in relays.items()}
                    p = subprocess.run([os.environ["BENCH_PYTHON"], os.path.join(HERE, "ws_client.py"),
                                        json.dumps(spec)], capture_output=True, text=True, timeout=600)
                    if p.returncode != 0:
                        raise RuntimeError(f"ws client: {p.stderr[-800:]}")
                    for name, pids in relays.items():
                        relay_s[name] += cpu_s(*pids) - before[name]
                    relayed += 2 * (WS_N + 100)  # two targets each, with the warm-up
                    res = json.loads(p.stdout)
                    load = loadavg()
                    for label in labels:
                        r = dict(res[label], label=label, client=client, round=rnd + 1, load=load)
                        runs.append(r)
                        log(f"  ws round {rnd + 1} {client:10s} {label:12s} median {r['median_us']:6.0f} us"
                            f"  p99 {r['p99_us']:6.0f} us  (load {load})")
            summ = {}
            for client in WS_CLIENTS:
                by = {(r["round"], r["label"]): r["median_us"] for r in runs if r["client"] == client}
                cs = summ[client] = {}
                for label in labels:
                    cs[label] = {"median_us": med([by[(i, label)] for i in range(1, WS_ROUNDS + 1)]),
                                 "p99_us": med([r["p99_us"] for r in runs
                                                if r["client"] == client and r["label"] == label])}
                    if label != "direct":
                        added = [by[(i, label)] - by[(i, "direct")] for i in range(1, WS_ROUNDS + 1)]
                        cs[label]["added_us_per_round"] = added
                        cs[label]["added_us"] = med(added)
            results["ws"] = {"runs": runs, "summary": summ, "n": WS_N, "clients": WS_CLIENTS,
                             "cpu_us_per_round_trip": {k: v / relayed * 1e6 for k, v in relay_s.items()}}
        results["end_rss_mib"] = rss_mib(pid)
        results["end_hwm_mib"] = hwm_mib(pid)
    finally:
        if chp:
            chp.stop()
        if floor:
            floor.stop()
        if unpolled_server:
            unpolled_server.stop()
        server.stop()


# ---------------------------------------------------------------------------------------------
# 6. Real kernels: `1+1` in JupyterLab through ours, WebSocket busy polling on and off


def bench_kernel(results):
    """What busy polling costs and buys on an editor's real traffic, not an echo's."""
    servers = {"polled": Server("kernel-polled", {"SANDBOX_PROXY__WEBSOCKET_BUSY_POLL_US": "100"}),
               "unpolled": Server("kernel-unpolled", {"SANDBOX_PROXY__WEBSOCKET_BUSY_POLL_US": "0"})}
    try:
        targets = []
        for label, server in servers.items():
            server.start()
            sid = server.launch("jupyterlab")["id"]
            server.wait_session(sid, "api/status")
            status, data = http_get(server.port, f"/s/{sid}/api/kernels", server.auth, "POST",
                                    {"name": "python3"}, timeout=60)
            if status != 201:
                raise RuntimeError(f"starting a kernel: HTTP {status} {data[:300]!r}")
            kernel = json.loads(data)
            targets.append({"label": label, "pids": [server.proc.pid],
                            "url": f"ws://127.0.0.1:{server.port}/s/{sid}/api/kernels/{kernel['id']}/channels",
                            "headers": [["Authorization", f"Bearer {server.token}"]]})
        rounds = []
        for rnd in range(KERNEL_ROUNDS):
            spec = {"n": KERNEL_N, "block": 50, "targets": targets[rnd % 2:] + targets[:rnd % 2]}
            p = subprocess.run([os.environ["BENCH_PYTHON"], os.path.join(HERE, "kernel_client.py"),
                                json.dumps(spec)], capture_output=True, text=True, timeout=900)
            if p.returncode != 0:
                raise RuntimeError(f"kernel client: {p.stderr[-800:]}")
            res = json.loads(p.stdout)
            load = loadavg()
            for label, r in res.items():
                log(f"  kernel round {rnd + 1} {label:9s} median {r['median_us']:7.0f} us  p99 {r['p99_us']:7.0f} us"
                    f"  server CPU {r['cpu_us_per_exec']:6.1f} us per execution  (load {load})")
            rounds.append(res)
        summ = {label: {"median_us": med([r[label]["median_us"] for r in rounds]),
                        "p99_us": med([r[label]["p99_us"] for r in rounds]),
                        "cpu_us_per_exec": med([r[label]["cpu_us_per_exec"] for r in rounds])}
                for label in servers}
        summ["polled_minus_unpolled_us_per_round"] = [r["polled"]["median_us"] - r["unpolled"]["median_us"]
                                                      for r in rounds]
        results["kernel"] = {"rounds": rounds, "summary": summ, "n": KERNEL_N}
    finally:
        for server in servers.values():
            server.stop()


# ---------------------------------------------------------------------------------------------
# Summary


def verdict(ok):
    return "met" if ok else "MISSED"


def summary_table(results):
    rows = []
    cold = results.get("cold", {}).get("summary", {})
    peer_alone = {"jupyterlab": 2.00, "marimo": 0.76, "code-server": 0.70}
    for editor, s in cold.items():
        diff = s["diff_of_medians_s"]
        rows.append((f"cold launch {editor} (median of {s['n']})",
                     f"{s['ours_median_s']:.2f} s",
                     f"alone {s['direct_median_s']:.2f} s: {diff:+.2f} s (pairs {s['median_pair_diff_s']:+.2f} s)",
                     "<= +0.20 s", verdict(diff <= 0.2),
                     f"alone {peer_alone[editor]:.2f} s" + ("; hub 3.50 s" if editor == "jupyterlab" else "")))
    for editor, s in results.get("sandbox", {}).get("summary", {}).items():
        rows.append((f"sandbox: cold launch {editor}", f"{s['cold_on_p50_s']:.2f} s",
                     f"off {s['cold_off_p50_s']:.2f} s: {s['cold_added_ms']:+.0f} ms", "<= +30 ms",
                     verdict(s["cold_added_ms"] <= 30), ""))
        rows.append((f"sandbox: warm launch {editor}", f"{s['warm_on_p50_s'] * 1000:.0f} ms",
                     f"off {s['warm_off_p50_s'] * 1000:.0f} ms", "p50 <= 50 ms",
                     verdict(s["warm_on_p50_s"] <= 0.05), ""))
    si = results.get("signin", {}).get("summary")
    if si:
        ratio = si.get("ratio_p50")
        rows.append(("sign-in latency p50 / p95", f"{si['ours']['p50_ms']:.1f} / {si['ours']['p95_ms']:.1f} ms",
                     (f"baseline {si['baseline']['p50_ms']:.1f} / {si['baseline']['p95_ms']:.1f} ms; ratio {ratio:.3f}"
                      if ratio else "no baseline"),
                     "unchanged (within 10%)", verdict(ratio <= 1.1) if ratio else "", ""))
    h = results.get("http", {}).get("summary")
    if h:
        per = h["ours_over_direct_per_round"]
        rod = med(per)
        rows.append((f"HTTP 1 KB req/s (median of {len(per)} rounds)", f"{h['ours']['rps']:.0f}",
                     f"direct {h['direct']['rps']:.0f}; ours/direct {rod:.2f}x "
                     f"(rounds {', '.join(f'{x:.2f}' for x in per)})",
                     ">= 0.5x direct", verdict(rod >= 0.5), ""))
        if "chp" in h:
            per = h["ours_over_chp_per_round"]
            roc = med(per)
            rows.append(("", "", f"CHP {h['chp']['rps']:.0f}; ours/CHP {roc:.2f}x "
                         f"(rounds {', '.join(f'{x:.2f}' for x in per)})",
                         ">= 6x CHP", verdict(roc >= 6), "CHP measured here"))
        if "nginx-proxy" in h:
            per = h["nginx-proxy"]["over_direct_per_round"]
            rows.append(("  floor: nginx as reverse proxy", f"{h['nginx-proxy']['rps']:.0f}",
                         f"nginx-proxy/direct {med(per):.2f}x (rounds {', '.join(f'{x:.2f}' for x in per)})",
                         "", "", ""))
        rows.append(("HTTP p50 / p99 latency", f"{h['ours']['p50_ms']:.2f} / {h['ours']['p99_ms']:.2f} ms",
                     f"direct {h['direct']['p50_ms']:.2f} / {h['direct']['p99_ms']:.2f} ms"
                     + (f"; CHP {h['chp']['p50_ms']:.2f} / {h['chp']['p99_ms']:.2f} ms" if "chp" in h else ""),
                     "", "", ""))
        rows.append(("proxy CPU per request", f"{h['ours']['proxy_cpu_us_per_req']:.0f} us",
                     "; ".join(f"{k} {h[k]['proxy_cpu_us_per_req']:.0f} us" for k in ("chp", "nginx-proxy") if k in h),
                     "", "", ""))
    ws = results.get("ws", {}).get("summary")
    cpu = results.get("ws", {}).get("cpu_us_per_round_trip")
    if cpu:
        rows.append(("proxy CPU per WebSocket round trip", f"{cpu['ours']:.1f} us",
                     "; ".join(f"{k} {v:.1f} us" for k, v in cpu.items() if k != "ours"), "", "", ""))
    for client in (ws or {}):
        w = ws[client]
        primary = client == "raw"
        rows.append((f"WebSocket RTT added, {client} client (median of {WS_ROUNDS} rounds)", "",
                     f"direct {w['direct']['median_us']:.0f} us" + (
                         "; one thread, one send and one recv per round trip" if primary else
                         "; the peer benchmark's client, with a thread hand-off of its own per message"),
                     "", "", ""))
        for label, what in (("ours-socket", "Unix socket to the editor (JupyterLab, code-server)"),
                            ("ours", "TCP to the editor (marimo)")):
            added = w[label]["added_us"]
            chp = (f"; CHP {w['chp']['added_us']:+.0f} us" if label == "ours" and "chp" in w else "")
            rows.append((f"  {what}", f"{added:+.0f} us",
                         f"ours {w[label]['median_us']:.0f} us{chp}; rounds "
                         + ", ".join(f"{x:+.0f}" for x in w[label]["added_us_per_round"]),
                         "<= 30 us", verdict(added <= 30),
                         "CHP adds 89-164 us" if label == "ours" and not primary else ""))
        def compared(title, socket, tcp, minuend, subtrahend, what):
            """A row for another relay: what it adds over the socket and TCP, and a difference
            paired by round, which cancels what the machine's state adds to both."""
            paired = [med([a - b for a, b in zip(w[x]["added_us_per_round"], w[y]["added_us_per_round"])])
                      for x, y in zip(minuend, subtrahend)]
            rows.append((title, f"{w[socket]['added_us']:+.0f} / {w[tcp]['added_us']:+.0f} us",
                         f"socket / TCP; {what}, paired by round: {paired[0]:+.0f} / {paired[1]:+.0f} us",
                         "", "", ""))
        if "unpolled" in w:
            compared("  ours with busy polling off", "unpolled-socket", "unpolled",
                     ("ours-socket", "ours"), ("unpolled-socket", "unpolled"), "ours (on) minus this")
        if "nginx-proxy" in w:
            compared("  floor: nginx as reverse proxy", "nginx-socket", "nginx-proxy",
                     ("ours-socket", "ours"), ("nginx-socket", "nginx-proxy"), "ours minus nginx")
    k = results.get("kernel", {}).get("summary")
    if k:
        rows.append((f"kernel execution, 1+1 in JupyterLab (median of {KERNEL_ROUNDS} rounds)",
                     f"{k['polled']['median_us'] / 1000:.2f} ms",
                     f"busy polling off {k['unpolled']['median_us'] / 1000:.2f} ms; on minus off by round "
                     + ", ".join(f"{x / 1000:+.2f}" for x in k["polled_minus_unpolled_us_per_round"]) + " ms",
                     "", "", ""))
        rows.append(("  server CPU per execution", f"{k['polled']['cpu_us_per_exec']:.0f} us",
                     f"busy polling off {k['unpolled']['cpu_us_per_exec']:.0f} us", "", "", ""))
    m = results.get("memory")
    if m:
        rows.append(("server RSS idle", f"{m['idle_rss_mib']:.1f} MiB", "", "<= 30 MB",
                     verdict(m["idle_rss_mib"] * 2**20 / 1e6 <= 30), "hub + CHP idle 182 MB"))
        rows.append(("server RSS, 10 ready sessions", f"{m['ten_sessions_rss_mib']:.1f} MiB", "", "<= 40 MB",
                     verdict(m["ten_sessions_rss_mib"] * 2**20 / 1e6 <= 40), ""))
        if "end_rss_mib" in results:
            rows.append(("server RSS after the load runs", f"{results['end_rss_mib']:.1f} MiB",
                         f"peak {results['end_hwm_mib']:.1f} MiB", "", "", ""))
    head = ("measurement", "ours", "reference (same run)", "goal", "verdict", "peer")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "  ".join(str(c).ljust(widths[i]) for i, c in enumerate(r)).rstrip()
    text = [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]
    text.append(f"load before {results['load_before']}  after {results['load_after']}  ({os.cpu_count()} CPUs)")
    return "\n".join(text)


# ---------------------------------------------------------------------------------------------
# 5. Warm launch: a pre-started editor is assigned; beside a cold launch on a pool without them


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


class Hub:
    """JupyterHub with its CHP (bench/hub_config.py): the peer's spawn, measured in our run."""

    def __init__(self):
        self.run = os.path.join(WORK, "hub")
        os.makedirs(os.path.join(self.run, "homes"), exist_ok=True)
        self.port, self.proxy_port, self.api_port = free_port(), free_port(), free_port()
        self.service_token = secrets.token_hex(32)
        self.env = dict(os.environ, BENCH_HUB_RUN=self.run, BENCH_HUB_VENV=HUB_VENV,
                        BENCH_HUB_PORT=str(self.port), BENCH_HUB_PROXY_PORT=str(self.proxy_port),
                        BENCH_HUB_PROXY_API_PORT=str(self.api_port), BENCH_HUB_CHP_TOKEN=secrets.token_hex(32),
                        BENCH_HUB_SERVICE_TOKEN=self.service_token,
                        PATH=f"{HUB_VENV}/bin:" + os.environ["PATH"])
        self.token = None
        self.proc = None

    def start(self):
        self.logf = open(os.path.join(LOGS, "jupyterhub.log"), "w")
        self.proc = subprocess.Popen([f"{HUB_VENV}/bin/jupyterhub", "-f", os.path.join(HERE, "hub_config.py")],
                                     cwd=self.run, env=self.env, stdout=self.logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = now() + 120
        while True:
            try:
                if http_get(self.proxy_port, "/hub/api/")[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or now() > deadline:
                raise RuntimeError(f"JupyterHub did not start (see {self.logf.name})")
            time.sleep(0.1)
        # The configured service token is hashed slowly on every request; an admin's
        # generated token is what a script would use.
        self.api("POST", "/users/benchadmin", token=self.service_token, ok=(201, 409))
        self.token = self.api("POST", "/users/benchadmin/tokens", token=self.service_token,
                              body={"note": "bench", "roles": ["admin"]}, ok=(201,))["token"]
        self.api("POST", "/users/hubuser", ok=(201, 409))
        return self

    def api(self, method, path, body=None, token=None, ok=(200, 201)):
        status, data = http_get(self.port, "/hub/api" + path, method=method, timeout=300,
                                headers={"Authorization": f"token {token or self.token}"},
                                body=body)
        if status not in ok:
            raise RuntimeError(f"hub {method} {path}: HTTP {status} {data[:300]!r}")
        return json.loads(data) if data else None

    def spawn(self):
        """POST the server, then poll its /api/status through CHP until 200: the seconds."""
        t0 = now()
        self.api("POST", "/users/hubuser/server", ok=(201, 202))
        hdr = {"Authorization": f"token {self.token}"}
        deadline = t0 + 300
        while True:
            try:
                if http_get(self.proxy_port, "/user/hubuser/api/status", headers=hdr)[0] == 200:
                    break
            except OSError:
                pass
            if now() > deadline:
                raise RuntimeError(f"the hub's server did not answer (see {self.logf.name})")
            time.sleep(0.01)
        t1 = now()
        self.api("DELETE", "/users/hubuser/server", ok=(202, 204))
        while True:
            user = self.api("GET", "/users/hubuser")
            if not user.get("servers") and user.get("pending") is None:
                break
            time.sleep(0.05)
        return t1 - t0

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        for pid_file in ("chp.pid",):
            try:
                with open(os.path.join(self.run, pid_file)) as f:
                    os.kill(int(f.read().strip()), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def bench_warm(results):
    avail = [e for e, p in PROGRAMS.items() if os.path.exists(p)]
    warm_cfg = "[" + ", ".join(f'{{ editor = "{e}", slice_mib = {SLICE}, count = 1 }}' for e in avail) + "]"
    warm = Server("warm", warm=warm_cfg).start()
    cold = Server("coldpool").start()
    n = int(os.environ.get("BENCH_WARM_N", 10))
    out = {"n": n, "runs": {e: {"warm": [], "cold": []} for e in avail}, "misses": {e: 0 for e in avail}}
    hub = None

    def pool_has_warm(editor):
        for size in warm.api("GET", "/pool"):
            if size["slice_mib"] == SLICE and any(e == editor and c > 0 for e, c in size["warm"]):
                return True
        return False

    def launch_warm(editor):
        deadline = now() + 300
        while not pool_has_warm(editor):
            if now() > deadline:
                raise RuntimeError(f"no warm {editor} after 300 s (see {warm.logf.name})")
            time.sleep(0.05)
        time.sleep(0.5)
        t0 = now()
        view = warm.launch(editor)
        t1 = warm.wait_session(view["id"], proxied_path(editor))
        if view["state"] != "ready":
            out["misses"][editor] += 1
        warm.stop_session(view["id"])
        return t1 - t0

    def launch_cold(editor):
        t0 = now()
        view = cold.launch(editor)
        t1 = cold.wait_session(view["id"], proxied_path(editor))
        cold.stop_session(view["id"])
        return t1 - t0

    try:
        if HUB_VENV and CHP_BIN and "jupyterlab" in avail:
            hub = Hub()
            hub.start()
            out["runs"]["jupyterlab"]["hub"] = []
            hub.spawn()  # warm-up, not counted: the first start fills the page cache
        for i in range(n):
            for editor in avail:
                order = [("warm", launch_warm), ("cold", launch_cold)]
                if hub and editor == "jupyterlab":
                    order.append(("hub", lambda _: hub.spawn()))
                # rotate which side goes first, so that none always follows the same one
                order = order[i % len(order):] + order[:i % len(order)]
                for side, fn in order:
                    out["runs"][editor][side].append(fn(editor))
                line = "  ".join(f"{side} {out['runs'][editor][side][-1]:.3f} s" for side, _ in sorted(order))
                log(f"  run {i + 1:2d} {editor:12s} {line}  (load {loadavg()})")
    finally:
        warm.stop()
        cold.stop()
        if hub:
            hub.stop()
    out["summary"] = {
        e: {**{f"{side}_{q}_s": pct(r[side], v) for side in r for q, v in (("p50", 0.5), ("p95", 0.95))},
            "misses": out["misses"][e]}
        for e, r in out["runs"].items()
    }
    results["warm"] = out
    for e, s in out["summary"].items():
        hub_part = (f" | JupyterHub spawn p50 {s['hub_p50_s']:.3f} s p95 {s['hub_p95_s']:.3f} s"
                    if "hub_p50_s" in s else "")
        log(f"  {e:12s} warm p50 {s['warm_p50_s']:.3f} s p95 {s['warm_p95_s']:.3f} s | "
            f"cold p50 {s['cold_p50_s']:.3f} s p95 {s['cold_p95_s']:.3f} s{hub_part} | warm misses {s['misses']}")


def bench_sandbox(results):
    """Cold and warm launches with the sandbox on and off, side by side: four servers, rotated."""
    avail = [e for e, p in PROGRAMS.items() if os.path.exists(p)]
    warm_cfg = "[" + ", ".join(f'{{ editor = "{e}", slice_mib = {SLICE}, count = 1 }}' for e in avail) + "]"
    off = '[local]\nisolation = "none"'
    servers = {
        ("cold", "on"): Server("sb-cold-on").start(),
        ("cold", "off"): Server("sb-cold-off", extra=off).start(),
        ("warm", "on"): Server("sb-warm-on", warm=warm_cfg).start(),
        ("warm", "off"): Server("sb-warm-off", warm=warm_cfg, extra=off).start(),
    }
    n = int(os.environ.get("BENCH_SANDBOX_N", 8))
    runs = {e: {f"{k}_{v}": [] for k, v in servers} for e in avail}

    def has_warm(server, editor):
        return any(size["slice_mib"] == SLICE and any(e == editor and c > 0 for e, c in size["warm"])
                   for size in server.api("GET", "/pool"))

    def wait_warm(server, editor):
        deadline = now() + 300
        while not has_warm(server, editor):
            if now() > deadline:
                raise RuntimeError(f"no warm {editor} after 300 s (see {server.logf.name})")
            time.sleep(0.05)
        time.sleep(0.5)

    def launch(key, editor):
        server = servers[key]
        if key[0] == "warm":
            wait_warm(server, editor)
        t0 = now()
        view = server.launch(editor)
        t1 = server.wait_session(view["id"], proxied_path(editor))
        if key[0] == "warm" and view["state"] != "ready":
            raise RuntimeError(f"a warm launch of {editor} was not ready at once")
        server.stop_session(view["id"])
        if key[0] == "warm":
            # The pool refills at once: the next launch, on any server, is not measured while a
            # pre-started editor starts beside it (it did, always before the same key, which
            # charged a warm server's refill to the sandbox's cold launch).
            wait_warm(server, editor)
        return t1 - t0

    try:
        # One launch of each, not counted: the first start fills the page cache.
        for editor in avail:
            launch(("cold", "on"), editor)
            launch(("cold", "off"), editor)
        keys = list(servers)
        # A Williams square: over four rounds each server follows each other one once, so what
        # one launch leaves behind (a pool refilling, an editor still exiting) weighs on all alike.
        williams = [[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]]
        for i in range(n):
            for editor in avail:
                order = [keys[k] for k in williams[i % len(williams)]]
                for key in order:
                    runs[editor][f"{key[0]}_{key[1]}"].append(launch(key, editor))
                line = "  ".join(f"{k} {runs[editor][k][-1]:.3f} s" for k in sorted(runs[editor]))
                log(f"  run {i + 1:2d} {editor:12s} {line}  (load {loadavg()})")
    finally:
        for server in servers.values():
            server.stop()
    summary = {}
    for editor, r in runs.items():
        summary[editor] = {f"{k}_p50_s": pct(v, 0.5) for k, v in r.items()}
        summary[editor]["cold_added_ms"] = 1000 * (pct(r["cold_on"], 0.5) - pct(r["cold_off"], 0.5))
        log(f"  {editor:12s} cold on {pct(r['cold_on'], 0.5):.3f} s off {pct(r['cold_off'], 0.5):.3f} s "
            f"(added {summary[editor]['cold_added_ms']:+.0f} ms) | warm on {pct(r['warm_on'], 0.5):.3f} s "
            f"off {pct(r['warm_off'], 0.5):.3f} s")
    results["sandbox"] = {"n": n, "runs": runs, "summary": summary}


def bench_signin(results):
    """Sign-in latency: a local account's password sign-in through the pages' server function,
    as the browser sends it, one at a time. With BENCH_BASELINE_BIN an earlier build serves beside
    ours and the two alternate, so the ratio is of one run."""
    n = int(os.environ.get("BENCH_SIGNIN_N", 40))
    servers = {"ours": Server("signin-ours")}
    baseline = os.environ.get("BENCH_BASELINE_BIN")
    if baseline:
        servers["baseline"] = Server("signin-baseline")
        servers["baseline"].bin = baseline
    for server in servers.values():
        server.start()
    runs = {k: [] for k in servers}
    try:
        paths = {}
        for key, server in servers.items():
            # The server function's path carries a hash of its own: read it off the sign-in form.
            status, page = http_get(server.port, "/login")
            found = re.search(rb'action="(/api/login[^"]*)"', page)
            if status != 200 or not found:
                raise RuntimeError(f"no sign-in form on {key}'s /login ({status})")
            paths[key] = found.group(1).decode()
        form = b"name=bench&password=bench-password"
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
        for i in range(n + 1):
            for key in (list(servers) if i % 2 else list(reversed(servers))):
                t0 = now()
                status, body = http_get(servers[key].port, paths[key], headers, "POST", form, timeout=30)
                took = now() - t0
                if status != 200:
                    raise RuntimeError(f"sign-in on {key}: {status} {body[:200]!r}")
                if i:  # the first of each is not counted
                    runs[key].append(took)
            # The throttle counts failures only; a pause keeps the rounds apart anyway.
            time.sleep(0.05)
    finally:
        for server in servers.values():
            server.stop()
    summary = {k: {"p50_ms": 1000 * pct(v, 0.5), "p95_ms": 1000 * pct(v, 0.95)} for k, v in runs.items()}
    if "baseline" in summary:
        summary["ratio_p50"] = summary["ours"]["p50_ms"] / summary["baseline"]["p50_ms"]
    log("  " + "  ".join(f"{k} p50 {v['p50_ms']:.1f} ms p95 {v['p95_ms']:.1f} ms"
                         for k, v in summary.items() if isinstance(v, dict))
        + (f"  ratio {summary['ratio_p50']:.3f}" if "ratio_p50" in summary else ""))
    results["signin"] = {"n": n, "runs": runs, "summary": summary}


def until(check, timeout, interval=0.01):
    """Seconds until check() is true (raises past timeout)."""
    t0 = now()
    while not check():
        if now() - t0 > timeout:
            raise RuntimeError(f"not within {timeout} s")
        time.sleep(interval)
    return now() - t0


def answers(port, path, headers=None, ok=(200,)):
    try:
        return http_get(port, path, headers, timeout=2)[0] in ok
    except OSError:
        return False


def bench_faults(results):
    """Faults: a kill -9 and restart with 100 ready sessions (time to the first answer and to
    every session answering through the proxy again, same processes); a kill -9 with 50 launches
    still starting (time to the first answer, and until every one is ended and refunded); and,
    with PostgreSQL (DATABASE_URL), how fast each route answers during an outage."""
    n_ready = int(os.environ.get("BENCH_FAULTS_READY", 100))
    n_stranded = int(os.environ.get("BENCH_FAULTS_STRANDED", 50))
    out = {}
    # Enough 8 GB slices for every session: ten 96 GB cards.
    cards = "".join(f"""
[[pool.gpus]]
name = "virtual-{i}"
model = "Virtual"
memory_mib = 98304
slice_mib = {SLICE}
""" for i in range(1, 10))
    bin_dir = os.path.join(WORK, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    never_ready = os.path.join(bin_dir, "never-ready")
    with open(never_ready, "w") as f:
        f.write("#!/bin/sh\nexec sleep 3600\n")
    os.chmod(never_ready, 0o755)
    env = {"SANDBOX_EDITORS__JUPYTERLAB": os.path.join(HERE, "standins/nginx-editor.sh"),
           "SANDBOX_EDITORS__MARIMO": never_ready}
    # The default runtime's way (issue 47: sandboxes outlive a killed server), as root;
    # BENCH_FAULTS_SANDBOX=0 for editors without one.
    if os.environ.get("BENCH_FAULTS_SANDBOX", "1") != "1" or os.geteuid() != 0:
        env["SANDBOX_LOCAL__ISOLATION"] = "none"
    log(f"  sandbox: {'off' if 'SANDBOX_LOCAL__ISOLATION' in env else 'on'}")
    server = Server("faults", env, extra=cards).start()
    try:
        # --- a restart with n_ready ready sessions
        sids = [server.launch("jupyterlab", minutes=60)["id"] for _ in range(n_ready)]
        for sid in sids:
            server.wait_session(sid, "api/status", timeout=180)
        before = set(server.editor_pids())
        server.kill9()
        time.sleep(1)
        t0 = now()
        server.respawn()
        first = until(lambda: answers(server.port, "/livez"), 60)
        pending = set(sids)
        def every_one():
            for sid in list(pending):
                if answers(server.port, f"/s/{sid}/api/status", server.auth):
                    pending.discard(sid)
            return not pending
        until(every_one, 120, interval=0.005)
        all_answer = now() - t0
        # Re-adopted editors are no children of the new server: the same PIDs, still running.
        same = sum(1 for pid in before if psutil.pid_exists(pid)
                   and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
        out["restart"] = {"sessions": n_ready, "first_answer_s": first, "all_answer_s": all_answer,
                          "same_processes": same, "editors_before": len(before)}
        log(f"  restart with {n_ready} ready sessions: first answer {first:.2f} s, every session "
            f"answering {all_answer:.2f} s; {same} of {len(before)} editors the same processes")
        for sid in sids:
            server.stop_session(sid)

        # --- a restart with n_stranded launches still starting
        stranded = [server.launch("marimo")["id"] for _ in range(n_stranded)]
        until(lambda: all(v["state"] == "starting" for v in server.api("GET", "/sessions")
                          if v["id"] in stranded), 60, interval=0.1)
        time.sleep(0.5)
        server.kill9()
        t0 = now()
        server.respawn()
        first = until(lambda: answers(server.port, "/livez"), 60)
        me = until(lambda: answers(server.port, "/api/v1/me", server.auth), 60) + first
        def all_ended():
            try:
                views = server.api("GET", "/sessions")
            except Exception:
                return False
            return all(v["state"] == "ended" for v in views if v["id"] in stranded)
        ended = until(all_ended, 300, interval=0.05) + me
        me_view = server.api("GET", "/me")
        out["stranded"] = {"launches": n_stranded, "first_answer_s": first, "me_s": me,
                           "all_ended_s": ended, "held_after": me_view["credits"]["held"]}
        log(f"  restart with {n_stranded} launches starting: first answer {first:.2f} s, /me {me:.2f} s, "
            f"every launch ended {ended:.2f} s, credits held after {me_view['credits']['held']}")
    finally:
        server.stop()

    # --- a PostgreSQL outage
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        log("  outage: skipped (no DATABASE_URL)")
        results["faults"] = out
        return
    db = f"bench_outage_{os.getpid()}"
    def psql(sql):
        subprocess.run(["psql", url, "-qtAc", sql], check=True, capture_output=True)
    psql(f"DROP DATABASE IF EXISTS {db}")
    psql(f"CREATE DATABASE {db}")
    base = url.rsplit("/", 1)[0]
    server = Server("outage", env)
    # A top-level key: before the configuration's first table.
    with open(server.config) as f:
        text = f.read()
    with open(server.config, "w") as f:
        f.write(f'database_url = "{base}/{db}"\n' + text)
    server.start()
    try:
        sid = server.launch("jupyterlab")["id"]
        server.wait_session(sid, "api/status", timeout=60)
        psql(f"ALTER DATABASE {db} ALLOW_CONNECTIONS false")
        psql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}'")
        routes = [("GET", "/livez", None), ("GET", "/readyz", None), ("GET", "/api/v1/health", None),
                  ("GET", "/api/v1/me", server.auth), ("GET", "/api/v1/sessions", server.auth),
                  ("POST", "/api/v1/sessions", server.auth), ("GET", f"/s/{sid}/api/status", server.auth),
                  ("GET", "/", None)]
        timings = {}
        for rnd in range(3):
            for method, path, headers in routes:
                body = {"editor": "jupyterlab", "slice_mib": SLICE, "duration_minutes": 15} if method == "POST" else None
                t0 = now()
                try:
                    status, _ = http_get(server.port, path, headers, method, body, timeout=30)
                except OSError as e:
                    status = f"error {e}"
                took = now() - t0
                timings.setdefault(f"{method} {path.replace(sid, '{id}')}", []).append((status, took))
        psql(f"ALTER DATABASE {db} ALLOW_CONNECTIONS true")
        healed = until(lambda: answers(server.port, "/readyz"), 60, interval=0.05)
        out["outage"] = {k: {"statuses": sorted({str(s) for s, _ in v}), "median_ms": 1000 * med([t for _, t in v]),
                             "max_ms": 1000 * max(t for _, t in v)} for k, v in timings.items()}
        out["outage_healed_s"] = healed
        for k, v in out["outage"].items():
            log(f"  outage: {k:<28} {','.join(v['statuses']):<8} median {v['median_ms']:.1f} ms, max {v['max_ms']:.1f} ms")
        log(f"  outage: ready again {healed:.2f} s after the database took connections again")
    finally:
        server.stop()
        try:
            psql(f"ALTER DATABASE {db} ALLOW_CONNECTIONS true")
            psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        except subprocess.CalledProcessError:
            pass
    results["faults"] = out


def main():
    os.makedirs(LOGS, exist_ok=True)
    os.makedirs(WORK, exist_ok=True)
    results = {"load_before": loadavg(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
               "cpus": os.cpu_count(), "knobs": {"cold_n": COLD_N, "cs_n": CS_N, "rounds": ROUNDS,
                                                  "wrk_dur": WRK_DUR, "ws_rounds": WS_ROUNDS, "ws_n": WS_N, "ws_block": WS_BLOCK}}
    log(f"== load before: {results['load_before']}")
    try:
        if "cold" in ONLY:
            log("== 1. cold launch: through the product vs the editor alone (alternating)")
            bench_cold(results)
        if "warm" in ONLY:
            log("== 5. warm launch (pre-started editor) vs cold launch, alternating")
            bench_warm(results)
        if "sandbox" in ONLY:
            log("== 8. the sandbox: cold and warm launches with it on and off, rotated")
            bench_sandbox(results)
        if "signin" in ONLY:
            log("== 9. sign-in latency: a password sign-in, ours beside a baseline build, alternating")
            bench_signin(results)
        if "faults" in ONLY:
            log("== 10. faults: restarts after kill -9 with ready and starting sessions; a database outage")
            bench_faults(results)
        if ONLY & {"memory", "http", "ws"}:
            log("== 2-4. memory, HTTP throughput, WebSocket round trips (stand-in editors)")
            bench_standins(results)
        if "kernel" in ONLY:
            log("== 6. real kernels: 1+1 in JupyterLab through ours, busy polling on and off")
            bench_kernel(results)
        if "crowd" in ONLY:
            log("== 5. the crowd at 9:00: a burst of launches into a warm pool, and one at a time")
            import crowd  # bench/crowd.py
            crowd.bench_crowd(results)
    finally:
        results["load_after"] = loadavg()
        log(f"== load after: {results['load_after']}")
        with open(os.path.join(OUT, "results.json"), "w") as f:
            json.dump(results, f, indent=2)
        # the workspaces are scratch; logs and results stay
        shutil.rmtree(WORK, ignore_errors=True)
    table = summary_table(results)
    with open(os.path.join(OUT, "summary.txt"), "w") as f:
        f.write(table + "\n")
    log("")
    log(table)


if __name__ == "__main__":
    main()
