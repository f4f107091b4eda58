"""The crowd at 9:00 (BENCHMARKS.md, section 5): N users press Launch at the same moment into a warm
pool of N pre-started editors, beside the same N launches one at a time, on one server, on SQLite
and on PostgreSQL (when DATABASE_URL names one).

Each user has an account and an API token of their own. A launch is timed from just before its
`POST /api/v1/sessions` to the first 200 of `GET /s/<id>/api/status` through the proxy (polled
every 10 ms until then); the POST's own time is kept beside it. The editor is the light stand-in
(bench/standins/nginx-editor.sh, as JupyterLab; unsandboxed), so the figures are the server's:
its allocator, its workspace bind and its proxy's first request. The pool has exactly N slots, so
no pre-started editor is started again while a mode runs; between modes every session is stopped
and the pool fills up again (not timed). Every user launches once before the rounds, as they did
the day before (their workspace exists). Rounds alternate which mode goes first.

Run through bench/run.sh (`BENCH_ONLY=crowd bash bench/run.sh`) or `bench.py` with its
environment. Knobs: BENCH_CROWD_N=50  BENCH_CROWD_ROUNDS=3  BENCH_CROWD_DB=sqlite,postgres
BENCH_CROWD_PERF=<folder> (a `perf record --call-graph dwarf` of the server during each burst)
BENCH_CROWD_STATEMENTS=1 (the server logs every SQL statement; each mode counts those it ran per
launch, by statement, a figure that does not move with the machine's load; times are slower then)
"""
import collections
import os
import re
import subprocess
import threading
import time

import bench as b

N = int(os.environ.get("BENCH_CROWD_N", 50))
ROUNDS = int(os.environ.get("BENCH_CROWD_ROUNDS", 3))
DBS = os.environ.get("BENCH_CROWD_DB", "sqlite,postgres").split(",")
# A folder: a `perf record` of the server (with its call stacks) during each burst goes there.
PERF = os.environ.get("BENCH_CROWD_PERF", "")
# Count the SQL statements each mode runs (sqlx's statement log), per launch.
STATEMENTS = os.environ.get("BENCH_CROWD_STATEMENTS", "0") == "1"
# Ten slices of 8 GiB on each 80 GiB card: exactly N slots.
CARD_MIB, SLICES_PER_CARD = 81920, 10


def pool_config(n):
    cards = -(-n // SLICES_PER_CARD)
    text = ""
    for i in range(cards):
        slices = min(SLICES_PER_CARD, n - i * SLICES_PER_CARD)
        text += (f'\n[[pool.gpus]]\nname = "virtual-{i}"\nmodel = "Virtual"\n'
                 f"memory_mib = {CARD_MIB * slices // SLICES_PER_CARD}\nslice_mib = {b.SLICE}\n")
    return text


class Crowd:
    """One server with N users and N pre-started stand-in editors."""

    def __init__(self, db):
        env = {"SANDBOX_EDITORS__JUPYTERLAB": os.path.join(b.HERE, "standins/nginx-editor.sh"),
               "SANDBOX_LOCAL__ISOLATION": "none"}
        if STATEMENTS:
            env["SANDBOX_LOG"] = "warn,sqlx::query=debug"
            env["SANDBOX_LOG_FORMAT"] = "json"
        warm = f'[{{ editor = "jupyterlab", slice_mib = {b.SLICE}, count = {N} }}]'
        self.server = b.Server(f"crowd-{db}", env, warm=warm)
        self.db = db
        self.pg_db = None
        with open(self.server.config) as f:
            text = f.read()
        # The bench's single card becomes exactly N slots.
        start = text.index("[[pool.gpus]]")
        end = text.index(f"slice_mib = {b.SLICE}", start) + len(f"slice_mib = {b.SLICE}\n")
        text = text[:start] + pool_config(N).lstrip("\n") + text[end:]
        if db == "postgres":
            url = os.environ["DATABASE_URL"]
            self.pg_url = url
            self.pg_db = f"bench_crowd_{os.getpid()}"
            self.psql(f"DROP DATABASE IF EXISTS {self.pg_db}")
            self.psql(f"CREATE DATABASE {self.pg_db}")
            # A top-level key: before the configuration's first table.
            text = f'database_url = "{url.rsplit("/", 1)[0]}/{self.pg_db}"\n' + text
        with open(self.server.config, "w") as f:
            f.write(text)
        self.users = []

    def psql(self, sql):
        subprocess.run(["psql", self.pg_url, "-qtAc", sql], check=True, capture_output=True)

    def start(self):
        s = self.server
        for i in range(N):
            name = f"crowd{i:02d}"
            s.cli("user", "add", name, "--password-stdin", stdin="crowd-password\n")
            token = s.cli("token", "create", "--user", name).splitlines()[-1].strip()
            self.users.append({"Authorization": f"Bearer {token}"})
        s.start()
        return self

    def warm_ready(self):
        for size in self.server.api("GET", "/pool"):
            if size["slice_mib"] == b.SLICE:
                return sum(c for e, c in size["warm"] if e == "jupyterlab")
        return 0

    def wait_full(self, timeout=300):
        deadline = b.now() + timeout
        while self.warm_ready() < N:
            if b.now() > deadline:
                raise RuntimeError(f"{self.warm_ready()} of {N} warm editors after {timeout} s "
                                   f"(see {self.server.logf.name})")
            time.sleep(0.1)
        time.sleep(1.0)  # the last starts settle

    def launch(self, i):
        """One user's launch: (seconds to the first proxied 200, seconds of the POST, warm?, (i, id))."""
        port, auth = self.server.port, self.users[i]
        body = {"editor": "jupyterlab", "slice_mib": b.SLICE, "duration_minutes": 15}
        t0 = b.now()
        status, data = b.http_get(port, "/api/v1/sessions", auth, "POST", body, timeout=60)
        t_post = b.now()
        if status not in (200, 201):
            raise RuntimeError(f"launch of user {i}: HTTP {status} {data[:200]!r}")
        view = b.json.loads(data)
        path = f"/s/{view['id']}/api/status"
        while True:
            st, _ = b.http_get(port, path, auth, timeout=60)
            if st == 200:
                break
            if b.now() - t0 > 60:
                raise RuntimeError(f"{path}: not 200 after 60 s (last {st})")
            time.sleep(0.01)
        return b.now() - t0, t_post - t0, view["state"] == "ready", (i, view["id"])

    def one_at_a_time(self):
        return [self.launch(i) for i in range(N)]

    def burst(self):
        results = [None] * N
        errors = []
        gate = threading.Barrier(N)

        def user(i):
            try:
                gate.wait()
                results[i] = self.launch(i)
            except Exception as e:  # reported below, after every thread has ended
                errors.append(e)
        threads = [threading.Thread(target=user, args=(i,)) for i in range(N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results

    def stop_all(self, runs):
        for _, _, _, (i, sid) in runs:
            status, data = b.http_get(self.server.port, f"/api/v1/sessions/{sid}", self.users[i], "DELETE")
            if status != 200 or b.json.loads(data)["state"] != "ended":
                raise RuntimeError(f"stopping {sid}: HTTP {status} {data[:200]!r}")

    def stop(self):
        try:
            self.server.stop()
        finally:
            if self.pg_db:
                try:
                    self.psql(f"DROP DATABASE IF EXISTS {self.pg_db} WITH (FORCE)")
                except subprocess.CalledProcessError:
                    pass


def statements_since(logf, offset):
    """The statements the server logged (as JSON lines) after `offset` of its log, counted by
    their text with its whitespace folded."""
    logf.flush()
    counted = collections.Counter()
    with open(logf.name, errors="replace") as f:
        f.seek(offset)
        for line in f:
            if '"sqlx::query"' not in line:
                continue
            try:
                event = b.json.loads(line)
            except ValueError:
                continue
            text = event.get("db.statement") or event.get("summary", "")
            counted[re.sub(r"\s+", " ", text).strip()] += 1
    return counted


def summary(values):
    ms = [1000 * v for v in values]
    return {"p50_ms": b.pct(ms, 0.5), "p95_ms": b.pct(ms, 0.95), "max_ms": max(ms)}


def bench_crowd(results):
    out = {"n": N, "rounds": ROUNDS, "runs": {}}
    dbs = [d for d in DBS if d == "sqlite" or os.environ.get("DATABASE_URL", "").startswith("postgres")]
    for db in dbs:
        crowd = Crowd(db).start()
        runs = {"burst": [], "one_at_a_time": []}
        cpu = {"burst": [], "one_at_a_time": []}
        statements = {"burst": [], "one_at_a_time": []}
        try:
            b.log(f"  {db}: filling the pool with {N} pre-started editors")
            crowd.wait_full()
            # Yesterday: every user has launched once (their workspace exists; not counted).
            crowd.stop_all(crowd.one_at_a_time())
            crowd.wait_full()
            for r in range(ROUNDS):
                order = ["burst", "one_at_a_time"]
                order = order[r % 2:] + order[:r % 2]
                for mode in order:
                    pid = crowd.server.proc.pid
                    perf = None
                    if PERF and mode == "burst":
                        perf = subprocess.Popen(["perf", "record", "-F", "1999", "--call-graph", "dwarf,16384", "-p", str(pid), "-o",
                                                 os.path.join(PERF, f"{db}-{r}.data")],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        time.sleep(1.0)
                    log0 = os.path.getsize(crowd.server.logf.name)
                    cpu0, client0 = b.cpu_s(pid), time.process_time()
                    got = getattr(crowd, mode)()
                    cpu[mode].append((b.cpu_s(pid) - cpu0, time.process_time() - client0))
                    if STATEMENTS:
                        counted = statements_since(crowd.server.logf, log0)
                        statements[mode].append(dict(counted))
                        b.log(f"  {db} round {r + 1} {mode}: {sum(counted.values()) / N:.1f} statements a launch")
                        for text, n in counted.most_common(40):
                            b.log(f"    {n / N:5.2f}  {text[:110]}")
                    if perf:
                        perf.send_signal(b.signal.SIGINT)
                        perf.wait()
                    misses = sum(1 for _, _, warm, _ in got if not warm)
                    if misses:
                        raise RuntimeError(f"{db} {mode}: {misses} of {N} launches found no warm editor")
                    runs[mode].append([(total, post) for total, post, _, _ in got])
                    s = summary([t for t, _ in runs[mode][-1]])
                    p = summary([p for _, p in runs[mode][-1]])
                    b.log(f"  {db} round {r + 1} {mode:13s} first 200 p50 {s['p50_ms']:6.1f} ms "
                          f"p95 {s['p95_ms']:6.1f} ms max {s['max_ms']:6.1f} ms | POST p50 "
                          f"{p['p50_ms']:6.1f} ms max {p['max_ms']:6.1f} ms | CPU per launch: server "
                          f"{1000 * cpu[mode][-1][0] / N:.1f} ms, client {1000 * cpu[mode][-1][1] / N:.1f} ms "
                          f"(load {b.loadavg()})")
                    crowd.stop_all(got)
                    crowd.wait_full()
        finally:
            crowd.stop()
        out["runs"][db] = runs
        out.setdefault("cpu_s", {})[db] = cpu
        if STATEMENTS:
            out.setdefault("statements", {})[db] = statements
    out["summary"] = {
        db: {mode: {"first_200": summary([t for rnd in rr for t, _ in rnd]),
                    "post": summary([p for rnd in rr for _, p in rnd])}
             for mode, rr in runs.items()}
        for db, runs in out["runs"].items()
    }
    results["crowd"] = out
    b.log(f"  {N} users, {ROUNDS} rounds each; time to the first 200 through the proxy (POST alone):")
    for db, modes in out["summary"].items():
        for mode, s in modes.items():
            f, p = s["first_200"], s["post"]
            b.log(f"  {db:8s} {mode:13s} p50 {f['p50_ms']:6.1f} ms  p95 {f['p95_ms']:6.1f} ms  "
                  f"max {f['max_ms']:6.1f} ms   (POST p50 {p['p50_ms']:.1f} ms, p95 {p['p95_ms']:.1f} ms)")
