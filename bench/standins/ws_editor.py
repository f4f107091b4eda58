"""Benchmark stand-in for marimo: a WebSocket echo server under the session's base URL.

Takes the arguments the server gives marimo and uses two of them: --port=P and --base-url=/s/<id>.
Answers a plain GET of <base>/health with 200 (marimo's readiness path); every WebSocket
handshake (e.g. <base>/ws) becomes an echo. Loopback only.
"""
import asyncio
import json
import os
import sys

from websockets.asyncio.server import serve

port, base = None, None
for arg in sys.argv[1:]:
    if arg.startswith("--port="):
        port = int(arg.split("=", 1)[1])
    elif arg.startswith("--base-url="):
        base = arg.split("=", 1)[1].rstrip("/")
if port is None or base is None:
    sys.exit("ws_editor: need --port= and --base-url=")
HEALTH = base + "/health"


def process_request(connection, request):
    if request.path.split("?", 1)[0] == HEALTH:
        return connection.respond(200, "ok\n")
    return None  # go on with the WebSocket handshake


async def echo(ws):
    async for message in ws:
        await ws.send(message)


async def main():
    run_dir = os.environ.get("JUPYTER_RUNTIME_DIR")
    if run_dir:
        with open(os.path.join(os.path.dirname(run_dir), "standin.json"), "w") as f:
            json.dump({"port": port, "pid": os.getpid(), "base": base}, f)
    async with serve(echo, "127.0.0.1", port, process_request=process_request,
                     compression=None, max_size=2**20):
        await asyncio.Future()


asyncio.run(main())
