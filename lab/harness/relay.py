"""A tiny TCP relay on 127.0.0.1 that counts bytes per direction, groups them
into flights (consecutive chunks in one direction) and can hold every chunk
for a fixed one-way delay, so that round trips show up as time."""

import socket
import threading
import time
import queue


class Relay:
    def __init__(self, upstream_port, delay=0.0):
        self.upstream_port = upstream_port
        self.delay = delay
        self.lock = threading.Lock()
        self.events = []  # (time, dir, nbytes)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30)
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._pipe(c, u, "c2s")
            self._pipe(u, c, "s2c")

    def _pipe(self, src, dst, d):
        q = queue.Queue()

        def reader():
            while True:
                try:
                    b = src.recv(65536)
                except OSError:
                    b = b""
                t = time.monotonic()
                if b:
                    with self.lock:
                        self.events.append((t, d, len(b)))
                q.put((t, b))
                if not b:
                    return

        def writer():
            while True:
                t, b = q.get()
                wait = t + self.delay - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not b:
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                try:
                    dst.sendall(b)
                except OSError:
                    return

        threading.Thread(target=reader, daemon=True).start()
        threading.Thread(target=writer, daemon=True).start()

    def mark(self):
        with self.lock:
            return len(self.events)

    def flights(self, since=0):
        with self.lock:
            ev = list(self.events[since:])
        out = []
        for t, d, n in ev:
            if out and out[-1]["dir"] == d:
                out[-1]["bytes"] += n
            else:
                out.append({"dir": d, "bytes": n, "t": t})
        return out

    def totals(self, since=0):
        f = self.flights(since)
        return (sum(x["bytes"] for x in f if x["dir"] == "c2s"),
                sum(x["bytes"] for x in f if x["dir"] == "s2c"))

    def close(self):
        self.closed = True
        self.sock.close()
