"""The API's bodies as dataclasses; each field is named as in the JSON."""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, TypeVar, get_type_hints

T = TypeVar("T")


def from_json(cls: Type[T], data: Any) -> T:
    """Builds a dataclass from a JSON object, nested dataclasses and lists of them included;
    fields a newer server adds are ignored."""
    hints = get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kw[f.name] = _convert(hints[f.name], data[f.name])
    return cls(**kw)


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    args = getattr(hint, "__args__", ())
    origin = getattr(hint, "__origin__", None)
    if origin is list and args and dataclasses.is_dataclass(args[0]):
        return [from_json(args[0], v) for v in value]
    inner = [a for a in args if a is not type(None)]
    if origin is not list and inner and dataclasses.is_dataclass(inner[0]):
        return from_json(inner[0], value)
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value)
    return value


@dataclass(frozen=True)
class Callback:
    """Where a fired timer is POSTed."""

    url: str


@dataclass(frozen=True)
class DeliveryRetry:
    """How punctual retries a webhook; None takes the tenant's default."""

    max_attempts: Optional[int] = None
    base_delay_ms: Optional[int] = None
    max_delay_ms: Optional[int] = None

    def to_json(self) -> Dict[str, int]:
        return _present(self)


@dataclass(frozen=True)
class Scheduled:
    """The answer to a schedule: the deadline and the version naming this scheduling."""

    tenant: str
    key: str
    fire_at_us: int
    version: int
    created: bool = field(default=False, metadata={"json": False})
    """True when no timer was pending under the key (201), False when one was replaced (200)."""

    @property
    def fire_at(self) -> datetime.datetime:
        return _from_us(self.fire_at_us)


@dataclass(frozen=True)
class Delivery:
    """How far a pending webhook timer's delivery has got."""

    state: str
    attempts: int
    next_at_us: int
    last_status: Optional[int] = None
    last_error: Optional[str] = None


@dataclass(frozen=True)
class PendingTimer:
    """A timer waiting to fire (or to be delivered)."""

    tenant: str
    key: str
    fire_at_us: int
    version: int
    payload: Any = None
    callback: Optional[Callback] = None
    retry: Optional[DeliveryRetry] = None
    delivery: Optional[Delivery] = None
    debounce: Optional["DebounceState"] = None

    @property
    def fire_at(self) -> datetime.datetime:
        return _from_us(self.fire_at_us)


@dataclass(frozen=True)
class ErrorDetail:
    code: str
    message: str
    # A conflict's (409 exists, 409 version_mismatch): the pending timer's version, and for
    # exists its deadline.
    version: Optional[int] = None
    fire_at_us: Optional[int] = None


@dataclass(frozen=True)
class Debounce:
    """A burst of writes held to one deadline at most max_wait_ms after its first."""

    max_wait_ms: int

    def to_json(self) -> Dict[str, Any]:
        return {"max_wait_ms": int(self.max_wait_ms)}


@dataclass(frozen=True)
class DebounceState:
    """A debounced timer's burst, as get shows it; cap_us is the latest its deadline may move to."""

    first_at_us: int
    max_wait_ms: int
    cap_us: int


@dataclass(frozen=True)
class ListedTimer:
    """A pending timer as a listing shows it; payload only when the listing asked for it."""

    key: str
    fire_at_us: int
    version: int
    payload: Any = None


@dataclass(frozen=True)
class TimerPage:
    """One page of a listing; next (the key to list after) is None on the last page."""

    timers: List[ListedTimer]
    next: Optional[str] = None


@dataclass(frozen=True)
class Action:
    """A bulk cancel's progress: state is "running" or "done"; matched counts the timers listed
    under the prefix, cancelled those the action cancelled; error says why it stopped before its
    end, if it did."""

    id: str
    state: str
    matched: int
    cancelled: int
    error: Optional[str] = None


@dataclass(frozen=True)
class BatchItem:
    """One timer of a batch: a key and exactly one deadline (as for put)."""

    key: str
    delay_ms: Optional[int] = None
    fire_at: Optional[Any] = None
    fire_at_ms: Optional[int] = None
    payload: Any = None
    callback: Optional[Any] = None
    retry: Optional[DeliveryRetry] = None
    # "if" in the API ("absent": create only); a trailing underscore, as "if" is Python's.
    if_: Optional[str] = None
    if_version: Optional[int] = None
    debounce: Optional[Debounce] = None


@dataclass(frozen=True)
class BatchResult:
    """One item's outcome, in the items' order; key is None when the item had none."""

    key: Optional[str]
    status: int
    fire_at_us: Optional[int] = None
    version: Optional[int] = None
    error: Optional[ErrorDetail] = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class DeadLetter:
    """A webhook timer whose delivery failed for good."""

    key: str
    version: int
    fire_at_us: int
    attempts: int
    callback: Optional[Callback] = None
    payload: Any = None
    last_status: Optional[int] = None
    last_error: Optional[str] = None


@dataclass(frozen=True)
class HistoryAttempt:
    """One attempt of a fire's webhook delivery: when it ended (at_us), and either the
    receiver's HTTP status or, when there was no answer, the class of the failure (error:
    "connect", "timeout", "dns", …); the other is None."""

    at_us: int
    status: Optional[int] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class HistoryEntry:
    """One fire of a timer (its key and version): its deadline, when it fired, the delivery's
    attempts in order (the last 100), and its outcome: "fired" (no webhook), "queued" (to the
    tenant's pull queue), "retrying" (a delivery under way, or stopped by a cancel or a
    replacement), "delivered" (an attempt answered 2xx) or "dead_lettered"."""

    key: str
    version: int
    fire_at_us: int
    fired_at_us: int
    lateness_us: int
    outcome: str
    attempts: List[HistoryAttempt] = field(default_factory=list)


@dataclass(frozen=True)
class HistoryPage:
    """One page of the history, newest first; next (the cursor of the next page, valid until
    the server restarts) is None on the last page."""

    entries: List[HistoryEntry]
    next: Optional[str] = None


@dataclass(frozen=True)
class Health:
    """/healthz: status "ok", "degraded" (a fleet node holds partitions it has not loaded for
    over 5 s; `partitions_not_loaded` lists them as ranges), "unavailable" or "draining"."""

    status: str
    shards: Optional[int] = None
    store: Optional[str] = None
    reason: Optional[str] = None
    partitions: Optional[int] = None
    partitions_not_loaded: Optional[str] = None


@dataclass(frozen=True)
class ClusterPartitions:
    count: int
    ranges: str


@dataclass(frozen=True)
class ClusterEpochs:
    min: int
    max: int
    partitions: Dict[str, str]


@dataclass(frozen=True)
class ClusterHolder:
    id: str
    advertise: Optional[str]
    started_at_us: Optional[int]
    partitions: ClusterPartitions
    epochs: Optional[ClusterEpochs]


@dataclass(frozen=True)
class ClusterThisNode:
    id: str
    holds: ClusterPartitions
    should_own: ClusterPartitions
    # Held, but not loaded within 5 s of their gain: an alert (their timers do not fire).
    load_overdue: Optional[ClusterPartitions] = None


@dataclass(frozen=True)
class ClusterStatus:
    """/cluster on a node of a Redis Cluster fleet."""

    read_at_us: int
    live: List[ClusterHolder]
    unowned: ClusterPartitions
    not_live: List[ClusterHolder]
    unreadable: ClusterPartitions
    this_node: ClusterThisNode


@dataclass(frozen=True)
class WebhookDelivery:
    """The body punctual POSTs to a callback."""

    tenant: str
    key: str
    version: int
    fire_at_us: int
    fired_at_us: int
    attempt: int
    payload: Any = None

    @property
    def id(self) -> str:
        """`<tenant>/<key>/<version>`: the same in every attempt, and signed; de-duplicate on it."""
        return f"{self.tenant}/{self.key}/{self.version}"


@dataclass(frozen=True)
class CatchUp:
    """What fires for occurrences missed (a downtime, a pause, a forward clock step): policy
    "skip", "latest" or "all", within window_ms; None takes the server's default."""

    policy: Optional[str] = None
    window_ms: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        return _present(self)


@dataclass(frozen=True)
class Dst:
    """A local time a daylight-saving gap skips ("shift" or "skip") or an overlap repeats
    ("first", "last" or "both"); None takes the server's default."""

    gap: Optional[str] = None
    overlap: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        return _present(self)


@dataclass(frozen=True)
class Occurrence:
    """One coming occurrence: its nominal UTC instant, and the local time in the schedule's zone."""

    occurrence_us: int
    local: str

    @property
    def at(self) -> datetime.datetime:
        return _from_us(self.occurrence_us)


@dataclass(frozen=True)
class Schedule:
    """A recurring schedule: definition is the body of its last put, as sent; sequence counts
    the occurrences fired; next the coming ones. created (not in the JSON) is True when put
    made it (201), False when it replaced one (200) or for any other call."""

    tenant: str
    key: str
    version: int
    paused: bool
    sequence: int
    definition: Dict[str, Any]
    next: List[Occurrence]
    created: bool = field(default=False, metadata={"json": False})


@dataclass(frozen=True)
class ListedSchedule:
    key: str
    version: int
    paused: bool
    sequence: int


@dataclass(frozen=True)
class SchedulePage:
    """One page of a tenant's schedules by key; next (the key to list after) is None on the last page."""

    schedules: List[ListedSchedule]
    next: Optional[str] = None


@dataclass(frozen=True)
class QueueMessage:
    """A received message: a fired timer without a callback, leased to this receive. receipt
    names this receive, for ack, nack and extend."""

    receipt: str
    key: str
    version: int
    fire_at_us: int
    fired_at_us: int
    receive_count: int
    payload: Any = None


@dataclass(frozen=True)
class SettleError:
    code: str
    message: str


@dataclass(frozen=True)
class SettleResult:
    """One receipt's outcome of ack, nack or extend: status 204 done, 409 lease_expired, 404
    unknown_receipt, 503 the store did not take it (error says which)."""

    receipt: str
    status: int
    error: Optional[SettleError] = None

    @property
    def ok(self) -> bool:
        return self.status == 204


@dataclass(frozen=True)
class QueueDepth:
    """A tenant's queue counted: depth is ready plus delayed; oldest_age_ms is None when none is ready."""

    tenant: str
    depth: int
    ready: int
    delayed: int
    in_flight: int
    max_receives: int
    oldest_age_ms: Optional[int] = None


def _present(obj: Any) -> Dict[str, Any]:
    """A dataclass's fields that are not None, as JSON: what the server defaults is left out."""
    return {k: v for k, v in dataclasses.asdict(obj).items() if v is not None}


def _from_us(us: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(microseconds=us)
