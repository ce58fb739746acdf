#!/usr/bin/env python3
"""A webhook receiver for punctual's deliveries on the standard library's http.server.

It verifies each delivery (Punctual-Signature or Standard Webhooks) against the tenant's
secrets with punctual.verify, which also refuses timestamps more than 5 minutes from this
clock, and processes each delivery once though punctual delivers at least once: it
de-duplicates on the signed (tenant, key, version), never on the unsigned Idempotency-Key.

    PUNCTUAL_WEBHOOK_SECRETS=new-secret…,old-secret… python3 examples/receiver.py 127.0.0.1:9000

Answers 204 when processed (or already processed) and 401 when the signature does not verify.
A real receiver records processed ids in its database, in the same transaction as the work
the delivery triggers; the set here is only in memory.
"""

import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import punctual

SECRETS = [s for s in os.environ.get("PUNCTUAL_WEBHOOK_SECRETS", "").split(",") if s]
_done = set()
_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: punctual reuses its connections

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            d = punctual.verify(self.headers, body, SECRETS)
        except punctual.WebhookVerificationError:
            return self.answer(401)
        with _lock:
            first = d.id not in _done
            _done.add(d.id)
        if first:
            print(f"timer {d.tenant}/{d.key} fired (attempt {d.attempt}): {d.payload}", flush=True)
        self.answer(204)

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    host, _, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9000").rpartition(":")
    ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler).serve_forever()
