"""``broker_transport = "celery_delayq.transport:Transport"`` (or ``:SentinelTransport``):
the transports live in ``celery_delayq.celery.transport``; this path stays for settings."""

from __future__ import annotations

from .celery.transport import Channel, SentinelChannel, SentinelTransport, Transport

__all__ = ["Channel", "SentinelChannel", "SentinelTransport", "Transport"]
