"""A client for the punctual timer service's HTTP API: timers, batches, recurring schedules, pull
queues, dead letters, health, and verification of the webhooks punctual delivers. `Client`
blocks; `AsyncClient` is the same for asyncio."""

from ._client import AsyncClient, Client
from ._core import NO_RETRY, RetryPolicy
from ._errors import ApiError, PunctualError, TransportError, WebhookVerificationError
from ._types import (Action, BatchItem, BatchResult, Callback, CatchUp, ClusterEpochs, ClusterHolder, ClusterPartitions, ClusterStatus,
                     ClusterThisNode, DeadLetter, Debounce, DebounceState, Delivery, DeliveryRetry, Dst, ErrorDetail, Health, HistoryAttempt, HistoryEntry, HistoryPage, ListedSchedule, ListedTimer,
                     Occurrence, PendingTimer, QueueDepth, QueueMessage, Schedule, SchedulePage, Scheduled, SettleError, SettleResult, TimerPage,
                     WebhookDelivery)
from .webhooks import verify

__all__ = [
    "AsyncClient", "Client", "RetryPolicy", "NO_RETRY",
    "PunctualError", "ApiError", "TransportError", "WebhookVerificationError",
    "Action", "BatchItem", "BatchResult", "Callback", "ClusterEpochs", "ClusterHolder", "ClusterPartitions", "ClusterStatus",
    "ClusterThisNode", "DeadLetter", "Debounce", "DebounceState", "Delivery", "DeliveryRetry", "ErrorDetail", "Health", "HistoryAttempt", "HistoryEntry", "HistoryPage", "ListedTimer", "PendingTimer", "Scheduled", "TimerPage",
    "WebhookDelivery", "verify",
    "CatchUp", "Dst", "ListedSchedule", "Occurrence", "QueueDepth", "QueueMessage", "Schedule", "SchedulePage", "SettleError", "SettleResult",
]
__version__ = "0.1.0"
