"""``schedule_many``: many delayed tasks from one process, in few store round trips.

``apply_async`` costs about half a millisecond a call: Celery builds the message, kombu
publishes it, and the store takes it in one round trip. Here the first delayed call of
each set of options runs ``apply_async`` itself, with the store write captured instead of
made: its message is the template. Every further call with the same options gets a copy
of it with what differs from call to call put in, computed as Celery computes it (task
id, ``eta``, ``argsrepr``/``kwargsrepr``, the body, the delivery tag), so workers cannot
tell the messages apart. Messages are stored in chunks, each in one atomic script call,
by a writer thread while the next chunk is built.

Calls of a task without limits whose ETA is not ahead, calls with ``expires`` (counted
from each call), and every call while ``before_task_publish`` or ``after_task_publish``
has receivers (they may change each message) or when messages are compressed, go through
``apply_async`` one by one (their store writes still chunked). A flow-controlled task's
calls are all kept, as ``apply_async`` keeps them: copies carry their template's gate,
and a due one enters its bucket as its chunk is stored (templates.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Union

from celery import Celery, Task
from kombu.messaging import Producer

from ..brokers.common.diverter import DelayqChannel, is_delayq_channel
from ..brokers.connect import StoreFactory
from ..config.errors import ConfigurationError, check_message_size
from ..core.store import ChunkPartlyStored, DelayedStore, Scheduled
from .templates import Template, templates_apply

#: Messages per atomic store call: ~200 core/lua/schedule.lua runs keep one call near 5 ms.
DEFAULT_CHUNK_SIZE = 200

#: The options that may differ between calls that share one template.
PER_CALL_OPTIONS = frozenset({"task_id", "countdown", "eta"})

#: One call: (args, kwargs, options), or a shorter tuple (the rest empty).
#: Options other than the per-call ones, as a key: calls with equal ones share a template.
Shape = tuple[tuple[str, str], ...]
Call = Union[Sequence[Any], Mapping[str, Any]]


class BulkScheduleError(Exception):
    """A chunk could not be stored. ``lost``: the task ids of that chunk that may not be
    stored (a broken connection leaves it unknown whether Redis ran the call);
    ``scheduled``: the ids of the calls before it, which are stored or published."""

    def __init__(self, chunk: int, lost: list[str], scheduled: list[str], cause: Exception):
        super().__init__(
            f"chunk {chunk} ({len(lost)} tasks, from {lost[0]!r}) may not be stored: {cause!r};"
            f" the {len(scheduled)} calls before it are"
        )
        self.chunk = chunk
        self.lost = lost
        self.scheduled = scheduled


def schedule_many(
    task: Task, calls: Iterable[Call], chunk_size: int = DEFAULT_CHUNK_SIZE
) -> list[str]:
    """Send ``task`` once per call, as ``task.apply_async(args, kwargs, **options)``
    would, and return the task ids in order.

    ``calls``: tuples ``(args, kwargs, options)``; ``task_id``, ``countdown`` and ``eta``
    may differ from call to call at full speed, any other option too (each different
    set of them costs one ``apply_async``). Each chunk of ``chunk_size`` delayed messages
    is stored in one atomic call (on a Redis Cluster, one per shard of the chunk).

    The calls go through the producer's channel, whose diverter hands their messages
    back (``Diverter.capture``); the chunks go to the store on the producer's pooled
    connection, opened by the one store factory (brokers/connect.py) as ``open_store``
    opens it for the command line and the dashboard.
    """
    if not 1 <= chunk_size <= 10_000:
        raise ValueError(f"chunk_size must be from 1 to 10000, got {chunk_size!r}")
    app: Celery = task._get_app()
    with app.producer_or_acquire() as producer:
        channel = producer.channel
        if not is_delayq_channel(channel):
            raise ConfigurationError(
                "schedule_many needs celery-delayq's transport (broker_transport)"
            )
        store, release = StoreFactory(app).on_pooled(producer.connection)
        try:
            with ThreadPoolExecutor(1, thread_name_prefix="delayq-schedule-many") as writer:
                batch = _Batch(app, task, producer, store, chunk_size, writer)
                try:
                    for call in calls:
                        batch.add(*_unpack(call))
                finally:  # also when a call is refused: every call before it is stored
                    batch.flush()
                    batch.wait()
        finally:
            release()
        return batch.ids


def _unpack(call: Call) -> tuple[Sequence[Any], Mapping[str, Any], Mapping[str, Any]]:
    args, kwargs, options = (*tuple(call), (), {}, {})[:3]
    return args or (), kwargs or {}, options or {}


class _Batch:
    """The calls of one ``schedule_many``: ids so far, templates, the chunk being filled."""

    def __init__(
        self,
        app: Celery,
        task: Task,
        producer: Producer,
        store: DelayedStore,
        chunk_size: int,
        writer: ThreadPoolExecutor,
    ) -> None:
        self.app = app
        self.task = task
        self.producer = producer
        self.channel: DelayqChannel = producer.channel
        self.store = store
        self.chunk_size = chunk_size
        self.ids: list[str] = []
        self.stored_before: list[str] = []  # ids of the calls before the current chunk
        self.chunk: list[Scheduled] = []
        self.chunks = 0
        self.templates: dict[Shape, Template] = {}
        self.fast = templates_apply(app)
        self.writer = writer
        self.writing: tuple[Future[None], list[Scheduled], int] | None = None

    def add(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> None:
        shape: Shape = ()
        if not options.keys() <= PER_CALL_OPTIONS:
            shape = tuple(
                sorted((k, repr(v)) for k, v in options.items() if k not in PER_CALL_OPTIONS)
            )
        template = self.templates.get(shape)
        scheduled = template.fill(args, kwargs, options) if template is not None else None
        if scheduled is None:
            scheduled = self._apply_async(args, kwargs, options, shape)
        else:  # refused as the transport refuses it (a copy skips the diverter)
            limit = self.channel.diverter.config.max_message_size
            check_message_size(len(scheduled.payload), limit, scheduled.queue, scheduled.task_id)
            self.ids.append(str(scheduled.task_id))
        if scheduled is not None:
            self.chunk.append(scheduled)
            if len(self.chunk) >= self.chunk_size:
                self.flush()

    def _apply_async(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: Mapping[str, Any],
        shape: Shape,
    ) -> Scheduled | None:
        """The call through Celery's own path; its delayed message, captured (also kept as
        the template of its options), or None when it was published at once."""
        with self.channel.diverter.capture() as captured:
            result = self.task.apply_async(args, kwargs, producer=self.producer, **options)
        self.ids.append(result.id)
        if not captured:
            return None
        if self.fast and shape not in self.templates and "expires" not in options:
            template = Template.of(self.app, self.task, captured[0], options)
            if template is not None:
                self.templates[shape] = template
        return captured[0]

    def flush(self) -> None:
        """Hand the chunk to the writer (one atomic store call) once the one before it is
        stored, and start the next: building a chunk overlaps storing the last."""
        chunk, self.chunk = self.chunk, []
        self.wait()
        if chunk:
            written = self.writer.submit(self.store.schedule_chunk, chunk)
            self.writing = (written, chunk, len(self.ids))

    def wait(self) -> None:
        """Until the chunk being written is stored; BulkScheduleError if it was not."""
        if self.writing is None:
            return
        written, chunk, ids_so_far = self.writing
        self.writing = None
        try:
            written.result()
        except ChunkPartlyStored as exc:
            lost = [str(message.task_id) for message in exc.unstored]
            raise BulkScheduleError(self.chunks, lost, self.stored_before, exc) from exc
        except Exception as exc:
            lost = [str(message.task_id) for message in chunk]
            raise BulkScheduleError(self.chunks, lost, self.stored_before, exc) from exc
        self.stored_before = self.ids[:ids_so_far]
        self.chunks += 1
