"""Verifies one delivery with the Standard Webhooks project's own Python library
(`standardwebhooks` on PyPI), as a receiver written in Python would.

Usage: python3 standard_webhooks_verify.py HEADERS_JSON BODY_FILE SECRET...
Prints, per secret, `verified` for the delivery as received and `refused` for the same body
with one byte added; exits non-zero on any other outcome.
"""
import json
import sys

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

headers = json.loads(sys.argv[1])
with open(sys.argv[2], "rb") as f:
    body = f.read()
for secret in sys.argv[3:]:
    wh = Webhook(secret)
    payload = wh.verify(body, headers)
    assert payload["key"], payload
    try:
        wh.verify(body + b" ", headers)
        print(f"{secret}: a tampered body verified")
        sys.exit(1)
    except WebhookVerificationError:
        pass
    print("verified, tampered refused")
