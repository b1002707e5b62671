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

import logging
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError
from botocore.validate import validate_parameters
from celery import Celery
from kombu.transport import SQS
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads

from ..core.handover.publishing import Publisher
from .common.diverter import store_retrying_errors, virtual_outbound
from .common.limit_keys import watch_limit_keys
from .common.message import Delivered, count_of, file_dead_letter
from .common.virtual_channel import VirtualDelayqChannel
from .common.virtual_publisher import VirtualPublisher

logger = logging.getLogger(__name__)

#: Error codes of an SQS reply that asks the caller to slow down: botocore's throttling
#: codes (botocore.retries.standard) that SQS sends, with and without the prefix of SQS's
#: query protocol, and KMS's for an encrypted queue.
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "KmsThrottled",
    }
)
SQS_CODE_PREFIX = "AWS.SimpleQueueService."

# The queue name the readability check hands kombu's ``_message_to_python``: no SQS queue
# has it, so kombu never takes the message for a no-ack queue's and deletes it.
ACKED = ""


class SQSChannel(VirtualDelayqChannel, SQS.Channel):
    """kombu's SQS channel with the delayed store (at ``delayq_store_url``)."""

    keeps_own_store = False
    #: Errors of a put that refuse its message alone, though kombu lists every
    #: ``BotoCoreError`` among SQS's connection errors: botocore's check of the
    #: arguments, before anything is sent (VirtualPublisher).
    refusals = (ParamValidationError,)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.set_up_diverter(args[0])
        self._only_checking = False  # check_sendable: kombu's put sends nothing
        super().__init__(*args, **kwargs)

    @classmethod
    def publisher_factory(cls, app: Celery) -> Callable[[], Publisher]:
        return lambda: VirtualPublisher(app.connection_for_write)

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        """Publish, or store until due (sent to the same queue when due)."""
        outbound = virtual_outbound(queue, message, destination=queue, validate=self.check_sendable)
        if not self.diverter.divert(outbound):
            super()._put(queue, message, **kwargs)

    def put_now(self, queue: str, message: dict[str, Any]) -> None:
        """kombu's own put, for a due message (never diverted to the store again). SQS
        throttling or failing is an outage, raised as one (``SQSUnavailable``): the
        hand-over gives the batch back and the mover backs off, charging no message a try."""
        try:
            super().put_now(queue, message)
        except ClientError as exc:
            if is_outage(exc):
                raise SQSUnavailable(error=exc) from exc
            raise

    def check_sendable(self, queue: str, payload: bytes) -> None:
        """Run kombu's own put of a message kept for later, as its hand-over will run it
        when due, but send nothing: botocore checks the SendMessage arguments kombu made
        of it (``ParamValidationError`` for a MessageGroupId that is no string), so the
        publish fails now, as a publish made at once fails, not every hand-over of it."""
        self._only_checking = True
        try:
            super()._put(queue, loads(payload))
        finally:
            self._only_checking = False

    def sqs(self, queue: str | None = None) -> Any:
        """kombu's SQS client; while a put is only checked, one that sends nothing."""
        client = super().sqs(queue)
        return ArgumentsCheck(client) if self._only_checking else client

    # -- what the worker's poison guard asks of a delivered message (worker/poison.py) --

    def envelope_bytes(self, body: str | bytes) -> bytes:
        """An SQS message's body as kombu's put wrote it: base64 undone when it is base64
        (kombu's own check, which every kombu version the plugin allows has)."""
        raw = body.encode() if isinstance(body, str) else bytes(body)
        return bytes(self._optional_b64_decode(raw))

    def delivered(self, message: Any) -> Delivered:
        """The queue ``message`` was received from (by its URL), and its envelope as SQS
        handed it out."""
        info = message.delivery_info or {}
        names = {url: name for name, url in self._queue_cache.items()}
        queue = str(names.get(info.get("sqs_queue")) or info.get("routing_key") or "")
        return Delivered(queue, queue, self.envelope_bytes(info["sqs_message"]["Body"]))

    @staticmethod
    def delivery_count(message: Any) -> int:
        """How many times SQS has handed ``message`` out (``ApproximateReceiveCount``,
        which kombu asks for), this time included."""
        received = (message.delivery_info or {}).get("sqs_message") or {}
        return count_of((received.get("Attributes") or {}).get("ApproximateReceiveCount"))

    # -- consuming: what kombu cannot turn into a message goes to the dead letters --

    def _on_messages_ready(self, queue: str, qname: str, messages: dict[str, Any]) -> Any:
        """kombu's delivery of what a receive returned, without the messages it cannot
        read (it would raise in the worker's event loop, and SQS give them back to the
        next worker after the visibility timeout)."""
        received = messages.get("Messages")
        if received:
            messages = {**messages, "Messages": self.readable(received, qname, queue)}
        return super()._on_messages_ready(queue, qname, messages)

    def _messages_to_python(self, messages: list[Any], queue: str) -> Any:
        """kombu's, for the messages it can read (the blocking receive)."""
        url = self._new_queue(queue)
        return super()._messages_to_python(self.readable(messages, queue, url), queue)

    def readable(self, received: list[Any], queue: str, url: str) -> list[Any]:
        """The received SQS messages kombu can turn into messages; each other one goes
        to the dead letters of ``queue`` with the reason, and is deleted from SQS."""
        kept = []
        for message in received:
            reason = self.unreadable(message, url)
            if reason is None:
                kept.append(message)
            else:
                self.dead_letter_received(message, queue, url, reason)
        return kept

    def unreadable(self, message: dict[str, Any], url: str) -> str | None:
        """Why kombu cannot turn a received SQS message into a message, or None: the
        steps of kombu's ``_message_to_python`` (without deleting a no-ack queue's
        message) and of its message class, tried."""
        try:
            payload = loads(bytes_to_str(self.envelope_bytes(message["Body"])))
        except Exception:  # not JSON: kombu's own conversion below says whether it copes
            payload = None
        if isinstance(payload, dict):
            properties = payload.get("properties", {})
            if not isinstance(properties, dict):
                return 'its "properties" is not an object'
            if not isinstance(properties.get("delivery_info", {}), dict):
                return 'its "delivery_info" is not an object'
        try:
            self.Message(super()._message_to_python(message, ACKED, url), channel=self)
        except Exception as exc:  # anything a hostile envelope makes kombu raise
            return f"kombu cannot read it: {exc!r}"[:300]
        return None

    def dead_letter_received(
        self, message: dict[str, Any], queue: str, url: str, reason: str
    ) -> None:
        """Keep a received SQS message as a dead letter of ``queue``, then delete it
        from SQS; if the dead letter cannot be written, SQS hands it out again after
        its visibility timeout."""
        body = message.get("Body") or ""
        try:  # the envelope, as kombu's put wrote it
            payload = self.envelope_bytes(body)
        except Exception:  # as SQS holds it
            payload = body.encode() if isinstance(body, str) else bytes(body)
        try:
            file_dead_letter(self.diverter.store, Delivered(queue, queue, payload), reason)
        except Exception as exc:
            logger.error("An unreadable message of queue %r is left in SQS: %r", queue, exc)
            return
        self.sqs(queue=queue).delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        logger.warning(
            "A message of queue %r cannot be read and went to the dead letters "
            "(`celery delayq dead`): %s",
            queue,
            reason,
        )

    def _purge(self, queue: str) -> int:
        """Empty the queue and its delayed messages; how many there were (``celery
        purge`` and ``app.control.purge()`` count them)."""
        return int(super()._purge(queue)) + self.diverter.store.purge(queue)


class SQSUnavailable(BotoCoreError):
    """SQS answered a put with throttling or a server error. A ``BotoCoreError``, so among
    the errors kombu counts as SQS's connection errors: an outage, not a refusal of the
    message (the ``ClientError`` it stands for is neither)."""

    fmt = "SQS cannot take messages now: {error}"


def is_outage(error: ClientError) -> bool:
    """Whether SQS's error reply says "not now" (throttling, or an error on its side),
    rather than refusing the message."""
    reply = error.response or {}
    code = str((reply.get("Error") or {}).get("Code") or "").removeprefix(SQS_CODE_PREFIX)
    status = (reply.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0
    return code in THROTTLING_CODES or int(status) >= 500


class SQSTransport(SQS.Transport):
    """SQS transport with the delayed store (``driver_type`` stays ``sqs``)."""

    Channel = SQSChannel
    recoverable_connection_errors = store_retrying_errors(SQS.Transport)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        watch_limit_keys()


class ArgumentsCheck:
    """Stands in for an SQS client while a put is only checked: each call's arguments are
    validated as botocore validates them before a request, and nothing is sent."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def __getattr__(self, method: str) -> Callable[..., None]:
        """``send_message`` and any other method of the client, as a check."""
        meta = self.client.meta
        try:
            operation = meta.method_to_api_mapping[method]
        except KeyError:
            raise AttributeError(method) from None
        shape = meta.service_model.operation_model(operation).input_shape

        def check(**arguments: Any) -> None:
            validate_parameters(arguments, shape)

        return check
