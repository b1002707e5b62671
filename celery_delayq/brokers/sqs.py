"""kombu's SQS transport whose channels keep future-ETA messages in Redis.

Select it with Celery settings only::

    broker_url = "sqs://"                      # kombu's SQS URL, credentials as usual
    broker_transport = "celery_delayq.transport:SQSTransport"
    delayq_store_url = "redis://redis:6379/0"

SQS caps a message's delay at 15 minutes, and an ETA longer than the visibility timeout
(at most 12 h) is redelivered again and again; here a message whose ``eta`` lies ahead
waits in Redis instead and is sent to its SQS queue when due, by kombu's own put.
Needs kombu's ``sqs`` extra (``pip install "celery-delayq[sqs]"``).
"""

from __future__ import annotations

from kombu.transport import SQS

from .common.diverter import VirtualChannelMixin, store_retrying_errors


class SQSChannel(VirtualChannelMixin, SQS.Channel):
    """SQS channel with the delayed store (at ``delayq_store_url``)."""


class SQSTransport(SQS.Transport):
    """SQS transport with the delayed store (``driver_type`` stays ``sqs``)."""

    Channel = SQSChannel
    recoverable_connection_errors = store_retrying_errors(SQS.Transport)
