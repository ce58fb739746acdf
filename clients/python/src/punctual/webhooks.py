"""Verification of the webhooks punctual delivers: Punctual-Signature (several secrets during
a key rotation) and Standard Webhooks, compared in constant time, with a bound on the
timestamp's distance from the receiver's clock."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from typing import Iterable, List, Mapping, Optional, Union

from ._errors import WebhookVerificationError
from ._types import WebhookDelivery, from_json

DEFAULT_TOLERANCE_S = 300


def verify(headers: Mapping[str, str], body: Union[bytes, str], secrets: Iterable[str], *,
           tolerance_s: float = DEFAULT_TOLERANCE_S, now: Optional[float] = None) -> WebhookDelivery:
    """Checks a delivery's signature, Punctual-Signature or Standard Webhooks' (whichever it
    carries), against every secret (for Standard Webhooks, those of the form whsec_<base64>: a
    list may hold both kinds), refuses a timestamp
    more than tolerance_s from now, and returns the signed body. Raises WebhookVerificationError.

    headers: any mapping; names are matched without regard to case."""
    h = {k.lower(): v for k, v in headers.items()}
    raw = body.encode() if isinstance(body, str) else bytes(body)
    secrets = list(secrets)
    now = time.time() if now is None else now
    if h.get("webhook-signature"):
        _verify_standard(h, raw, secrets, tolerance_s, now)
    elif h.get("punctual-signature"):
        _verify_punctual(h["punctual-signature"], raw, secrets, tolerance_s, now)
    else:
        raise WebhookVerificationError("the delivery carries no signature header")
    try:
        d = json.loads(raw)
        return from_json(WebhookDelivery, d)
    except (ValueError, TypeError) as e:
        raise WebhookVerificationError(f"the signed body is not a delivery: {e}") from None


def _fresh(t: int, tolerance_s: float, now: float) -> None:
    if abs(now - t) > tolerance_s:
        raise WebhookVerificationError(f"the timestamp is {now - t:.0f} s from now, past the tolerance of {tolerance_s:g} s")


def _any_equal(want: bytes, candidates: List[bytes]) -> bool:
    found = False
    for c in candidates:  # every candidate, each compared in constant time
        found |= hmac.compare_digest(want, c)
    return found


def _verify_punctual(header: str, body: bytes, secrets: List[str], tolerance_s: float, now: float) -> None:
    t, sigs = None, []
    for part in header.split(","):
        k, _, v = part.strip().partition("=")
        if k == "t" and v.isdigit():
            t = int(v)
        elif k == "v1":
            try:
                sigs.append(bytes.fromhex(v))
            except ValueError:
                pass
    if t is None or not sigs:
        raise WebhookVerificationError("Punctual-Signature is malformed")
    _fresh(t, tolerance_s, now)
    signed = f"{t}.".encode() + body
    for s in secrets:
        if _any_equal(hmac.new(s.encode(), signed, hashlib.sha256).digest(), sigs):
            return
    raise WebhookVerificationError("no signature matches any of the secrets")


def _verify_standard(h: Mapping[str, str], body: bytes, secrets: List[str], tolerance_s: float, now: float) -> None:
    msg_id, ts = h.get("webhook-id", ""), h.get("webhook-timestamp", "")
    if not msg_id or not ts.isdigit():
        raise WebhookVerificationError("webhook-id or webhook-timestamp is missing or malformed")
    sigs = []
    for part in h["webhook-signature"].split():
        version, _, value = part.partition(",")
        if version == "v1":
            try:
                sigs.append(base64.b64decode(value, validate=True))
            except (binascii.Error, ValueError):
                pass
    if not sigs:
        raise WebhookVerificationError("webhook-signature holds no v1 signature")
    _fresh(int(ts), tolerance_s, now)
    signed = f"{msg_id}.{ts}.".encode() + body
    usable = 0
    for s in secrets:
        try:
            key = base64.b64decode(s[len("whsec_"):] if s.startswith("whsec_") else s, validate=True)
        except (binascii.Error, ValueError):
            continue  # a Punctual-Signature secret, in a list that holds both kinds
        usable += 1
        if _any_equal(hmac.new(key, signed, hashlib.sha256).digest(), sigs):
            return
    if not usable:
        raise WebhookVerificationError("no Standard Webhooks secret (whsec_<base64>) among the secrets")
    raise WebhookVerificationError("no signature matches any of the secrets")
