"""A TCP relay the test can partition: connections through it reach their server until `cut()`, which
stops relaying in both directions and leaves every socket open (no FIN, no RST: the peer only stops
hearing, as when a switch drops the link); `heal()` relays new connections again and drops the dead
ones (their owners reconnect). Runs in a thread of the test process.
"""

from __future__ import annotations

import select
import socket
import threading


class Partitionable:
    def __init__(self, target: tuple[str, int], listen: str = "127.0.0.1") -> None:
        self.target = target
        self.server = socket.create_server((listen, 0))
        self.port = self.server.getsockname()[1]
        self.cut_off = threading.Event()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self.cut_off.set()

    def heal(self) -> None:
        with self.lock:
            dead, self.pairs = self.pairs, []
        for a, b in dead:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass
        self.cut_off.clear()

    def close(self) -> None:
        self.closed = True
        self.heal()
        self.server.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.cut_off.is_set():
                with self.lock:  # held open, never answered: a partition, not a refusal
                    self.pairs.append((client, client))
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.pairs.append((client, upstream))
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 0.2)
                if self.cut_off.is_set():
                    continue  # hold everything: nothing passes either way
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    (b if s is a else a).sendall(data)
        except (OSError, ValueError):
            return
