"""Sequential 100-byte WebSocket echo round trips against several targets at once, interleaved.

usage: ws_client.py SPEC_JSON
  SPEC_JSON = {"n": 2000, "block": 100, "client": "raw",
               "targets": [{"label": "direct", "url": "ws://…", "headers": [["k", "v"]]}, …]}

One connection per target; the targets take turns in blocks of `block` (default 100) round trips
(100 direct, 100 ours, 100 CHP, 100 direct, …) until each has had n, so a change in the machine's
load hits all targets alike, while each block keeps its path warm as a sequential run would.
Each round trip is one send and one receive on one connection; nothing is in flight elsewhere.

client:
  raw         (default) one thread, a blocking socket: the round trip is one send() of a masked
              frame and recv() of the echo, so the client adds no wake-ups of its own.
  websockets  the `websockets` library's sync client, as the peer benchmark (shared/bench) uses.
              It receives on a background thread and hands each message to the caller, so every
              round trip also carries a thread hand-off inside the client.
Prints JSON: per label n, median_us, p99_us, min_us, max_us, mean_us.
"""
import base64
import hashlib
import json
import os
import socket
import statistics
import sys
import time
from urllib.parse import urlparse

MSG = "x" * 100
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class RawClient:
    """A minimal RFC 6455 client for unfragmented 100-byte text echoes."""

    FRAMES = 512  # masked frames prepared ahead, each with its own key, used in turn

    def __init__(self, url, headers):
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16))
        target = u.path + (f"?{u.query}" if u.query else "")
        request = (f"GET {target} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
                   "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Key: {key.decode()}\r\nSec-WebSocket-Version: 13\r\n"
                   + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n")
        self.sock.sendall(request.encode())
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError(f"{url}: connection closed during the handshake")
            response += chunk
        head, rest = response.split(b"\r\n\r\n", 1)
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
        if not head.startswith(b"HTTP/1.1 101") or accept not in head:
            raise RuntimeError(f"{url}: not a WebSocket handshake: {head[:300]!r}")
        if rest:
            raise RuntimeError(f"{url}: unexpected bytes after the handshake")
        self.payload = MSG.encode()
        # Client frames are masked with a fresh key each (RFC 6455 5.3); prepared here so the
        # loop measures the path, not Python's byte twiddling.
        self.frames = [self.masked(0x1, self.payload) for _ in range(self.FRAMES)]
        self.sent = 0
        self.buf = b""
        self.sock.settimeout(None)

    @staticmethod
    def masked(opcode, payload):
        assert len(payload) < 126
        mask = os.urandom(4)
        return (bytes([0x80 | opcode, 0x80 | len(payload)]) + mask
                + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def fill(self, n):
        """Until the buffer holds n bytes; one recv() per echo in the usual case."""
        while len(self.buf) < n:
            more = self.sock.recv(65536)
            if not more:
                raise RuntimeError("connection closed mid-frame")
            self.buf += more

    def read_frame(self):
        """(opcode, payload) of the next unmasked server frame."""
        self.fill(2)
        b0, b1 = self.buf[0], self.buf[1]
        if b1 & 0x80:
            raise RuntimeError("a masked frame from the server")
        length, start = b1 & 0x7F, 2
        if length == 126:
            self.fill(4)
            length, start = int.from_bytes(self.buf[2:4], "big"), 4
        elif length == 127:
            self.fill(10)
            length, start = int.from_bytes(self.buf[2:10], "big"), 10
        self.fill(start + length)
        payload, self.buf = self.buf[start:start + length], self.buf[start + length:]
        return b0 & 0x0F, payload

    def round_trip(self):
        self.sock.sendall(self.frames[self.sent % self.FRAMES])
        self.sent += 1
        while True:
            opcode, payload = self.read_frame()
            if opcode == 0x9:  # a ping (the server's keepalive): answer, keep waiting
                self.sock.sendall(self.masked(0xA, payload))
                continue
            if opcode == 0x1 and payload == self.payload:
                return
            raise RuntimeError(f"unexpected frame {opcode:#x} {payload[:20]!r}")

    def close(self):
        try:
            self.sock.sendall(self.masked(0x8, (1000).to_bytes(2, "big")))
        except OSError:
            pass
        self.sock.close()


class LibraryClient:
    def __init__(self, url, headers):
        from websockets.sync.client import connect
        self.ws = connect(url, additional_headers=[tuple(h) for h in headers],
                          compression=None, open_timeout=10)

    def round_trip(self):
        self.ws.send(MSG)
        if self.ws.recv() != MSG:
            raise RuntimeError("unexpected reply")

    def close(self):
        self.ws.close()


def main():
    spec = json.loads(sys.argv[1])
    n = spec["n"]
    block = spec.get("block", 100)
    client = {"raw": RawClient, "websockets": LibraryClient}[spec.get("client", "raw")]
    conns = []
    try:
        for t in spec["targets"]:
            conns.append((t["label"], client(t["url"], t.get("headers", [])), []))
        for _ in range(100):  # warm-up, not counted
            for _, c, _ in conns:
                c.round_trip()
        while len(conns[0][2]) < n:
            for _, c, rtt in conns:
                for _ in range(min(block, n - len(rtt))):
                    t0 = time.perf_counter_ns()
                    c.round_trip()
                    rtt.append((time.perf_counter_ns() - t0) / 1000)
    finally:
        for _, c, _ in conns:
            c.close()
    out = {}
    for label, _, rtt in conns:
        s = sorted(rtt)
        out[label] = {"n": n, "median_us": statistics.median(s), "p99_us": s[int(0.99 * n) - 1],
                      "min_us": s[0], "max_us": s[-1], "mean_us": statistics.mean(s)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
