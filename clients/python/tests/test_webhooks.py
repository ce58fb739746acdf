import datetime
import os
import queue
import select
import socket
import subprocess
import sys
import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError as OfficialError

import punctual
from punctual import WebhookVerificationError
from conftest import ACME_TOKEN, EXAMPLE_PORT, NEW_SECRET, OLD_SECRET, STD_TOKEN, WHSEC, WHSEC_OLD


def deliver(server, receiver, token, tenant, key, secrets):
    """Schedules tenant/key due now with a callback to a receiver that verifies with secrets;
    (headers, body, delivery or the verification error) of the first attempt."""
    got = queue.Queue()

    def handle(headers, body):
        try:
            d = punctual.verify(headers, body, secrets)
            got.put((headers, body, d))
            return 204
        except WebhookVerificationError as e:
            got.put((headers, body, e))
            return 401

    hook = receiver.mount(f"/hook/{tenant}/{key}", handle)
    with punctual.Client(server.url, token=token) as c:
        s = c.put(tenant, key, delay_ms=0, callback=hook, payload={"order": key})
    headers, body, d = got.get(timeout=20)
    if not isinstance(d, Exception):
        assert (d.key, d.version, d.payload, d.attempt) == (key, s.version, {"order": key}, 1)
    return headers, body, d


@pytest.mark.parametrize("secrets", [[OLD_SECRET], [NEW_SECRET], ["not-this-one-0123456789abcdef0123456", NEW_SECRET]])
def test_punctual_signature_verifies_during_a_rotation(tenants_server, receiver, secrets):
    headers, _, d = deliver(tenants_server, receiver, ACME_TOKEN, "acme", f"rot{len(secrets)}{secrets[0][:5]}", secrets)
    assert isinstance(d, punctual.WebhookDelivery)
    assert d.id == headers["idempotency-key"]


def test_a_secret_the_tenant_lacks_does_not_verify(tenants_server, receiver):
    _, _, d = deliver(tenants_server, receiver, ACME_TOKEN, "acme", "stale", ["stale-secret-0123456789abcdef0123456789"])
    assert isinstance(d, WebhookVerificationError)


def test_tampering_old_timestamps_and_missing_headers_are_refused(tenants_server, receiver):
    headers, body, d = deliver(tenants_server, receiver, ACME_TOKEN, "acme", "tamper", [NEW_SECRET])
    assert isinstance(d, punctual.WebhookDelivery)
    with pytest.raises(WebhookVerificationError, match="no signature matches"):
        punctual.verify(headers, body.replace(b'"tamper"', b'"tamperX"'), [NEW_SECRET])
    t = int(headers["punctual-signature"].split(",")[0][2:])
    with pytest.raises(WebhookVerificationError, match="tolerance"):
        punctual.verify(headers, body, [NEW_SECRET], now=t + 301)
    assert punctual.verify(headers, body, [NEW_SECRET], now=t + 299).key == "tamper"
    with pytest.raises(WebhookVerificationError, match="no signature header"):
        punctual.verify({}, body, [NEW_SECRET])
    with pytest.raises(WebhookVerificationError, match="malformed"):
        punctual.verify({"punctual-signature": "v1=00"}, body, [NEW_SECRET])


@pytest.mark.parametrize("secret", [WHSEC, WHSEC_OLD])
def test_standard_webhooks_delivery_verifies_here_and_with_the_official_library(tenants_server, receiver, secret):
    headers, body, d = deliver(tenants_server, receiver, STD_TOKEN, "std", "s" + secret[-4:], [secret])
    assert isinstance(d, punctual.WebhookDelivery) and headers["webhook-id"] == d.id
    official = Webhook(secret)
    assert official.verify(body, headers)["key"] == d.key
    tampered = body + b" "
    with pytest.raises(OfficialError):
        official.verify(tampered, headers)
    with pytest.raises(WebhookVerificationError):
        punctual.verify(headers, tampered, [secret])


def test_standard_webhooks_agrees_with_the_official_library_on_its_own_signatures():
    """Signatures made by the official library verify here, with the same verdicts on
    changed ids, timestamps, bodies and secrets."""
    wh = Webhook(WHSEC)
    now = time.time()
    ts = datetime.datetime.fromtimestamp(int(now), tz=datetime.timezone.utc)
    body = '{"tenant":"t","key":"k","version":7,"fire_at_us":1,"fired_at_us":2,"attempt":1,"payload":{"a":[1,"é"]}}'
    good = {"webhook-id": "t/k/7", "webhook-timestamp": str(int(now)), "webhook-signature": wh.sign("t/k/7", ts, body)}
    variants = {
        "as signed": (good, body, WHSEC),
        "other id": ({**good, "webhook-id": "t/k/8"}, body, WHSEC),
        "other timestamp": ({**good, "webhook-timestamp": str(int(now) + 1)}, body, WHSEC),
        "other body": (good, body.replace("7", "8", 1), WHSEC),
        "other secret": (good, body, WHSEC_OLD),
        "two signatures": ({**good, "webhook-signature": "v1,bm90LXRoaXMtb25l " + good["webhook-signature"]}, body, WHSEC),
        "old": ({**good, "webhook-timestamp": str(int(now) - 400),
                 "webhook-signature": wh.sign("t/k/7", ts - datetime.timedelta(seconds=400), body)}, body, WHSEC),
    }
    for name, (headers, b, secret) in variants.items():
        try:
            Webhook(secret).verify(b, headers)
            official_ok = True
        except OfficialError:
            official_ok = False
        try:
            punctual.verify(headers, b, [secret], now=now)
            ours_ok = True
        except WebhookVerificationError:
            ours_ok = False
        assert ours_ok == official_ok, name
        assert ours_ok == (name in ("as signed", "two signatures")), name


def test_the_receiver_example(tenants_server):
    """examples/receiver.py, run as it is, with secrets of both schemes: it verifies a
    Punctual-Signature delivery (one secret of a rotation) and a Standard Webhooks one, and
    processes each once."""
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "receiver.py")
    env = {**os.environ, "PUNCTUAL_WEBHOOK_SECRETS": f"{OLD_SECRET},{WHSEC}"}
    p = subprocess.Popen([sys.executable, example, f"127.0.0.1:{EXAMPLE_PORT}"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", EXAMPLE_PORT), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < end, "the example did not listen"
                time.sleep(0.02)
        hook = f"http://127.0.0.1:{EXAMPLE_PORT}/hook"
        lines = []
        for token, tenant in ((ACME_TOKEN, "acme"), (STD_TOKEN, "std")):
            with punctual.Client(tenants_server.url, token=token) as c:
                c.put(tenant, "example", delay_ms=0, callback=hook, payload=1)
            ready, _, _ = select.select([p.stdout], [], [], 20)
            assert ready, f"no delivery to {tenant} processed within 20 s"
            lines.append(p.stdout.readline().strip())
        assert lines == ["timer acme/example fired (attempt 1): 1", "timer std/example fired (attempt 1): 1"]
    finally:
        p.kill()
        p.wait()
