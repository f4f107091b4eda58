"""Benchmark stand-in for marimo or code-server: a WebSocket echo server.

As marimo (SANDBOX_EDITORS__MARIMO) it takes --port=P and --base-url=/s/<id> and answers a plain
GET of <base>/health (marimo's readiness path). As code-server (SANDBOX_EDITORS__CODE_SERVER) it
takes --socket=PATH, listens there as code-server would, and answers GET /healthz (the proxy
strips code-server's prefix); it also listens on a TCP port of its own for the "direct"
measurement. Every WebSocket handshake (e.g. <base>/ws) becomes an echo. Loopback only.
"""
import asyncio
import json
import os
import socket
import sys

from websockets.asyncio.server import serve, unix_serve

port, base, sock = None, None, None
for arg in sys.argv[1:]:
    if arg.startswith("--port="):
        port = int(arg.split("=", 1)[1])
    elif arg.startswith("--base-url="):
        base = arg.split("=", 1)[1].rstrip("/")
    elif arg.startswith("--socket="):
        sock = arg.split("=", 1)[1]
if sock is None and (port is None or base is None):
    sys.exit("ws_editor: need --socket=, or --port= and --base-url=")
HEALTH = "/healthz" if sock else base + "/health"
if port is None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]


def process_request(connection, request):
    if request.path.split("?", 1)[0] == HEALTH:
        return connection.respond(200, "ok\n")
    return None  # go on with the WebSocket handshake


async def echo(ws):
    async for message in ws:
        await ws.send(message)


async def main():
    options = dict(process_request=process_request, compression=None, max_size=2**20)
    async with serve(echo, "127.0.0.1", port, **options):
        if sock:
            if os.path.exists(sock):
                os.unlink(sock)
            server = await unix_serve(echo, sock, **options)
        run_dir = os.environ.get("JUPYTER_RUNTIME_DIR")
        if run_dir:
            with open(os.path.join(os.path.dirname(run_dir), "standin.json"), "w") as f:
                json.dump({"port": port, "socket": sock, "pid": os.getpid(), "base": base}, f)
        await asyncio.Future()


asyncio.run(main())
