"""Every route and field of docs/openapi.yaml has its place in the client: each operation a
method of Client and AsyncClient, each query parameter a keyword of it, each property of each
schema a field of the dataclass (or a keyword of the method) that carries it. A route or field
added to the document fails this test until the client has it."""

import dataclasses
import inspect
import keyword

import yaml

import punctual
from conftest import ROOT

OPERATIONS = {
    "putTimer": "put", "getTimer": "get", "cancelTimer": "cancel", "postBatch": "batch", "listTimers": "list",
    "bulkCancel": "cancel_prefix", "getAction": "action",
    "listDeadLetters": "dead_letters", "redriveDeadLetter": "redrive", "discardDeadLetter": "discard",
    "getHistory": "history",
    "health": "health", "metrics": "metrics", "clusterStatus": "cluster",
    "listSchedules": "schedules", "putSchedule": "put_schedule", "getSchedule": "get_schedule",
    "deleteSchedule": "delete_schedule", "pauseSchedule": "pause_schedule", "resumeSchedule": "resume_schedule",
    "getQueue": "queue", "receiveMessages": "receive", "ackMessages": "ack", "nackMessages": "nack",
    "extendMessages": "extend",
}

# Schema → what carries its properties: a dataclass, or a method whose keywords do.
SCHEMAS = {
    "TimerFields": punctual.Client.put, "PutTimerRequest": punctual.Client.put,
    "BatchItemRequest": punctual.BatchItem, "Scheduled": punctual.Scheduled, "Timer": punctual.PendingTimer,
    "Callback": punctual.Callback, "Debounce": punctual.Debounce, "DebounceState": punctual.DebounceState, "Retry": punctual.DeliveryRetry, "Delivery": punctual.Delivery,
    "DeadLetter": punctual.DeadLetter, "HistoryPage": punctual.HistoryPage, "HistoryEntry": punctual.HistoryEntry,
    "HistoryAttempt": punctual.HistoryAttempt, "TimerPage": punctual.TimerPage, "ListedTimer": punctual.ListedTimer,
    "ActionStarted": punctual.Action, "Action": punctual.Action, "WebhookDelivery": punctual.WebhookDelivery,
    "BatchItemScheduled": punctual.BatchResult, "BatchItemFailed": punctual.BatchResult,
    "HealthOk": punctual.Health, "HealthDegraded": punctual.Health, "HealthUnavailable": punctual.Health, "HealthDraining": punctual.Health,
    "ErrorDetail": punctual.ErrorDetail, "ClusterStatus": punctual.ClusterStatus,
    "ClusterHolder": punctual.ClusterHolder, "ClusterPartitions": punctual.ClusterPartitions,
    "ClusterEpochs": punctual.ClusterEpochs, "ClusterThisNode": punctual.ClusterThisNode,
    "PutScheduleRequest": punctual.Client.put_schedule, "RecurringSchedule": punctual.Schedule,
    "RecurringScheduleList": punctual.SchedulePage,
    "ReceiveRequest": punctual.Client.receive, "AckRequest": punctual.Client.ack, "NackRequest": punctual.Client.nack,
    "ExtendRequest": punctual.Client.extend, "QueueMessage": punctual.QueueMessage, "QueueDepth": punctual.QueueDepth,
}
# Envelopes the client unwraps: their one property.
ENVELOPES = {"BatchRequest": "timers", "BatchResponse": "results", "DeadList": "dead", "Error": "error",
             "ReceivedMessages": "messages", "SettleResults": "results"}
# Objects nested in a schema's property (an array's items, an object): what carries their properties.
NESTED = {
    ("RecurringSchedule", "next"): punctual.Occurrence, ("RecurringScheduleList", "schedules"): punctual.ListedSchedule,
    ("PutScheduleRequest", "catch_up"): punctual.CatchUp, ("PutScheduleRequest", "dst"): punctual.Dst,
    ("SettleResults", "results"): punctual.SettleResult,
}


def load():
    with open(ROOT / "docs" / "openapi.yaml") as f:
        return yaml.safe_load(f)


def properties(all_schemas, s):
    if "$ref" in s:
        return properties(all_schemas, all_schemas[s["$ref"].rsplit("/", 1)[1]])
    out = dict(s.get("properties", {}))
    for comb in ("allOf", "oneOf", "anyOf"):
        for sub in s.get(comb, []):
            out.update(properties(all_schemas, sub))
    return out


def is_error_body(s):
    return any(sub.get("$ref") == "#/components/schemas/Error" for sub in s.get("allOf", []))


def api_name(name):
    """A Python name as the API spells it: `if_` carries the field `if`, a keyword of Python's."""
    return name[:-1] if name.endswith("_") and keyword.iskeyword(name[:-1]) else name


def names_of(carrier):
    if dataclasses.is_dataclass(carrier):
        return {api_name(f.name) for f in dataclasses.fields(carrier)}
    return {api_name(p) for p in inspect.signature(carrier).parameters}


def test_every_route_has_a_method_on_both_clients():
    doc = load()
    missing, seen = [], 0
    for path, item in doc["paths"].items():
        for verb, op in item.items():
            if verb not in ("get", "put", "post", "delete", "patch"):
                continue
            seen += 1
            name = OPERATIONS.get(op.get("operationId"))
            if name is None:
                missing.append(f"{verb.upper()} {path} ({op.get('operationId')}) has no client method")
                continue
            for cls in (punctual.Client, punctual.AsyncClient):
                method = getattr(cls, name, None)
                if method is None:
                    missing.append(f"{cls.__name__}.{name} does not exist")
                    continue
                for p in op.get("parameters", []):
                    if p.get("in") == "query" and p["name"] not in inspect.signature(method).parameters:
                        missing.append(f"{cls.__name__}.{name} has no keyword for the query parameter {p['name']}")
    assert not missing, "\n".join(missing)
    assert seen == len(OPERATIONS), "an operation the client maps is gone from the document"


def test_every_schema_field_has_a_python_field():
    schemas = load()["components"]["schemas"]
    missing = []
    for name, s in sorted(schemas.items()):
        props = properties(schemas, s)
        if not props or is_error_body(s):
            continue
        if name in ENVELOPES:
            assert list(props) == [ENVELOPES[name]], name
            continue
        carrier = SCHEMAS.get(name)
        if carrier is None:
            missing.append(f"schema {name} ({sorted(props)}) has nothing in the client")
            continue
        for p in sorted(set(props) - names_of(carrier)):
            missing.append(f"schema {name}: field {p!r} is not in {carrier.__qualname__}")
    assert not missing, "\n".join(missing)


def test_coverage_notices_a_missing_field():
    @dataclasses.dataclass
    class Partial:
        key: str

    assert "version" not in names_of(Partial)
    assert {"delay_ms", "fire_at", "fire_at_ms", "payload", "callback", "retry"} <= names_of(punctual.Client.put)
    schemas = load()["components"]["schemas"]
    assert {"key", "fire_at", "delay_ms", "payload", "callback", "retry"} <= set(properties(schemas, schemas["BatchItemRequest"]))


def test_every_nested_object_field_has_a_python_field():
    schemas = load()["components"]["schemas"]
    missing = []
    for (name, prop), carrier in sorted(NESTED.items(), key=lambda kv: kv[0]):
        s = properties(schemas, schemas[name])[prop]
        s = s.get("items", s)
        props = properties(schemas, s)
        assert props, f"{name}.{prop} has no properties: NESTED names it wrongly"
        for p in sorted(set(props) - names_of(carrier)):
            missing.append(f"schema {name}.{prop}: field {p!r} is not in {carrier.__qualname__}")
    error = properties(schemas, schemas["SettleResults"])["results"]["items"]["properties"]["error"]
    for p in sorted(set(error["properties"]) - names_of(punctual.SettleError)):
        missing.append(f"schema SettleResults.results.error: field {p!r} is not in SettleError")
    assert not missing, "\n".join(missing)
