"""A real HTTP webhook receiver for the notifier's tests: a stdlib ThreadingHTTPServer on a free
loopback port that records every POST (its Idempotency-Key header and JSON body). `down()` closes
the listening socket (posts get connection refused, as from a receiver that is not running) and
`up()` listens again on the same port; `fail_with` answers posts with that status instead."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.posts: list[dict] = []
        """Each taken post: {"key", "body", "at", "authorization"}."""
        self.refused = 0
        self.fail_with: int | None = None
        self.on_post = None
        """Called with each taken post's body after it is recorded and before it is answered (a test
        stopping the sender there: the receiver answered, the sender never saw it)."""
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> "Receiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if receiver.fail_with is not None:
                    with receiver.lock:
                        receiver.refused += 1
                    self.send_response(receiver.fail_with)
                    self.end_headers()
                    return
                with receiver.lock:
                    receiver.posts.append({"key": self.headers.get("Idempotency-Key"), "body": json.loads(raw),
                                           "at": time.time(), "authorization": self.headers.get("Authorization")})
                if receiver.on_post is not None:
                    receiver.on_post(json.loads(raw))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def events(self) -> list[dict]:
        """Every event the receiver took, digests opened: each with the key of the post it came in."""
        with self.lock:
            posts = list(self.posts)
        return [{**event, "post_key": p["key"]} for p in posts for event in p["body"]["relaunch"]["events"]]

    def event_keys(self) -> list[str]:
        return [e["key"] for e in self.events()]
