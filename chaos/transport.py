"""celery-delayq's transport with one addition: receipts, acks and rejects go in the ledger.

kombu redelivers a message (``redelivered`` set) only if it is still in its
``unacked`` hash when the visibility timeout runs out, i.e. only if no ack of it
reached Redis. Noting which acks succeeded lets the analysis tell Celery's
at-least-once redelivery apart from a copy that came from anywhere else. Nothing
else changes (unless faults are injected on purpose): the channel is celery-delayq's
own, so publishing, the delayed store and the worker mover behave exactly as for users.
"""

from __future__ import annotations

import os
import random
from typing import Any

from kombu.transport import redis as kombu_redis

from celery_delayq import transport as delayq_transport
from celery_delayq.brokers.redis.restore import LockFreeQoS

from .config import ENV_FAULTS, ENV_INCARNATION
from .ledger import process_ledger

#: With faults injected, one delayed publish in this many is dropped, one doubled.
FAULT_EVERY = 1000
_fault_rng = random.Random()


def _fault(message: dict[str, Any]) -> str | None:
    """The fault to inject into this publish, noted in the ledger (``Z``), if any."""
    if os.environ.get(ENV_FAULTS) != "1" or not (message.get("headers") or {}).get("eta"):
        return None
    draw = _fault_rng.randrange(FAULT_EVERY)
    fault = "drop" if draw == 0 else "double" if draw == 1 else None
    if fault is not None:
        headers = message["headers"]
        process_ledger().write("Z", fault=fault, id=headers.get("id"), r=headers.get("retries"))
    return fault


class RecordingQoS(LockFreeQoS):
    """celery-delayq's QoS (kombu's Redis ack emulation, restoring without the mutex),
    noting each receipt and each ack's outcome."""

    def append(self, message: Any, delivery_tag: str) -> None:
        """Called right after the consume took ``message`` from the queue list: note
        whether its ``unacked`` entry was written (without it, nothing can redeliver it;
        the atomic consume wrote it with the take, kombu's BRPOP path writes it here)."""
        headers = message.headers or {}
        fields = {
            "tag": delivery_tag,
            "id": headers.get("id"),
            "r": headers.get("retries"),
            "inc": os.environ.get(ENV_INCARNATION, "unknown"),
        }
        ledger = process_ledger()
        try:
            super().append(message, delivery_tag)
        except Exception as exc:
            ledger.write("R", ok=False, e=f"{type(exc).__name__}: {exc}"[:200], **fields)
            raise
        ledger.write("R", ok=True, **fields)

    def ack(self, delivery_tag: str) -> None:
        self._noted(super().ack, delivery_tag, "ack")

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self._noted(
            lambda tag: super(RecordingQoS, self).reject(tag, requeue), delivery_tag, "reject"
        )

    @staticmethod
    def _noted(call: Any, delivery_tag: str, how: str) -> None:
        ledger = process_ledger()
        incarnation = os.environ.get(ENV_INCARNATION, "unknown")
        try:
            call(delivery_tag)
        except Exception as exc:
            ledger.write(
                "A",
                tag=delivery_tag,
                inc=incarnation,
                ok=False,
                how=how,
                e=f"{type(exc).__name__}: {exc}"[:200],
            )
            raise
        ledger.write("A", tag=delivery_tag, inc=incarnation, ok=True, how=how)


class Channel(delayq_transport.Channel):
    QoS = RecordingQoS

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        """Publish; with ``--inject-faults`` (a self-check of the harness), drop or
        deliver twice one delayed message in ``FAULT_EVERY``, as a broken store would."""
        fault = _fault(message)
        if fault == "drop":
            return
        super()._put(queue, message, **kwargs)
        if fault == "double":
            kombu_redis.Channel._put(self, queue, message, **kwargs)  # a second, early copy


class Transport(delayq_transport.Transport):
    Channel = Channel
