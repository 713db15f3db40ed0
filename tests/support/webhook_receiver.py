"""A real webhook receiver for the alert tests: records every request it gets, then answers as told.

    python tests/support/webhook_receiver.py --port 9999 --log received.jsonl [--mode ok|fail|hang]

Each POST is appended to the log (one JSON line: path, headers, body, time) and fsynced BEFORE the answer,
so a request counts as received even when the sender dies waiting for the answer. ``POST /_control`` with
``{"mode": "ok"|"fail"|"hang"|"close", "status": 503, "hang_s": 60}`` changes the behaviour ("close" drops the
connection without an answer; "hang" answers 200 after ``hang_s``, so a small one is a slow receiver); paths
under /gone always answer 404 (a mistyped URL); "going down" is the
test killing this process (and starting it again on the same port and log).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STATE: dict[str, Any] = {"mode": "ok", "status": 503, "hang_s": 60.0}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    log_path = ""

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/_control":
            with LOCK:
                STATE.update(json.loads(body))
            self._answer(200, json.dumps(STATE).encode())
            return
        with LOCK:
            mode, status, hang_s = STATE["mode"], STATE["status"], STATE["hang_s"]
            record = {
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode(errors="replace"),  # the agent sends gzip
                "t": time.time(),
                "mode": mode,
            }
            with open(self.log_path, "a") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())
        if self.path.startswith("/gone"):  # a wrong URL: retrying cannot help
            self._answer(404, b'{"error": "no such hook"}')
            return
        if mode == "close":
            self.close_connection = True
            return
        if mode == "hang":
            time.sleep(hang_s)
        if mode == "fail":
            self._answer(status, b'{"error": "told to fail"}')
            return
        self._answer(200, b'{"ok": true}')

    def do_GET(self) -> None:
        self._answer(200, json.dumps(STATE).encode())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--mode", default="ok")
    args = p.parse_args()
    STATE["mode"] = args.mode
    Handler.log_path = args.log
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
