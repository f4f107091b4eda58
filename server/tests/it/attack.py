# The attempts of the isolation tests (server/tests/it/isolation.rs and end2end's code-server
# terminal test): each by name, whether it succeeded and what it got or why it failed, as one JSON
# line. The caller prepends the targets (OTHER_FILE … DB_PORT) as Python assignments.
import json, os, socket
results = {}
def attempt(name, act):
    try:
        got = act()
        results[name] = [True, str(got)[:200]]
    except BaseException as e:
        results[name] = [False, type(e).__name__ + ": " + str(e)[:200]]

def read(path):
    with open(path, "rb") as f:
        return f.read(64)

def connect_unix(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(3)
    s.connect(path)
    return "connected"

def connect_tcp(port):
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
    return "connected"

attempt("read another user's workspace", lambda: read(OTHER_FILE))
attempt("list the workspaces", lambda: os.listdir(WORKSPACES))
attempt("read the database", lambda: read(DATABASE))
attempt("list the data directory", lambda: os.listdir(DATA_DIR))
attempt("read the server's environment", lambda: read(f"/proc/{SERVER_PID}/environ"))
attempt("see another editor's process", lambda: read(f"/proc/{OTHER_PID}/cmdline"))
attempt("signal another editor", lambda: os.kill(OTHER_PID, 0))
attempt("connect to another editor's socket", lambda: connect_unix(OTHER_SOCKET))
attempt("connect to the database server", lambda: connect_tcp(DB_PORT))
attempt("write another user's workspace", lambda: open(OTHER_DIR + "/planted.txt", "w").write("x"))
print(json.dumps(results))
