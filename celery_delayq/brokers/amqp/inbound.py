"""Inbound frames py-amqp cannot decode in the worker's event loop.

RabbitMQ passes a message's properties to its consumers as their publisher wrote them, and
py-amqp decodes them in the worker's event loop, where any exception ends the worker
("Unrecoverable error"); RabbitMQ then delivers the message again to the next worker,
which ends too. Two shapes any client may publish did so:

- a header table nested deeper than Python's recursion limit (py-amqp decodes one level
  per Python call; RabbitMQ carries as many levels as fit in a frame, about
  ``frame_max / 5``: 26 000 at the default 128 KiB). Raising the recursion limit in the
  event loop's thread is no cure: before Python 3.11 each level also takes C stack, and
  26 000 levels overflow a thread's 8 MiB (a segfault). Such a frame is decoded again in
  a thread of its own, with a stack and a recursion limit for the deepest table the frame
  can hold; the message is then delivered as usual, and the worker's poison guard moves it
  to the dead letters (its headers nest too deep for Celery).
- properties py-amqp cannot decode at all: a short string that is not UTF-8 (a
  ``correlation_id`` of raw bytes), a timestamp no ``datetime`` holds. The message is
  delivered with its body and one header only, ``UNREADABLE_HEADER``, saying why, and the
  poison guard moves it to the dead letters with that reason.

Frames decode as before otherwise. (A header frame's handling includes, for a message
without a body, handing it to its consumer; the event loop's thread waits meanwhile.)
"""

from __future__ import annotations

import struct
import sys
import threading
from collections.abc import Callable
from typing import Any

import amqp

from ..common.message import UNREADABLE_HEADER

HEADER_FRAME = 2
#: Bytes a table nesting level takes at least on the wire ("A" or "F", a 4-byte length).
LEVEL_BYTES = 5
#: Stack a nesting level may take (Python frames of py-amqp's decoder, C stack before
#: Python 3.11), with a margin: measured under 700 bytes on CPython 3.9.
STACK_PER_LEVEL = 2048
BASE_STACK = 8 * 1024 * 1024
_CONTENT_HEADER = struct.Struct(">HHQ")  # class id, weight, body size

FrameHandler = Callable[[Any], Any]


def deep_frame_handler(make: Callable[..., FrameHandler]) -> Callable[..., FrameHandler]:
    """py-amqp's ``frame_handler`` factory ``make``, whose handlers deal with a header
    frame they cannot decode as the module says."""

    def make_deep(*args: Any, **kwargs: Any) -> FrameHandler:
        on_frame = make(*args, **kwargs)

        def on_deep_frame(frame: Any) -> Any:
            try:
                return on_frame(frame)
            except Exception as exc:
                frame_type, channel, payload = frame
                if frame_type != HEADER_FRAME:
                    raise
                # the handler failed before its state changed (the message waits for its
                # header still), so the frame, or one in its place, can be handled again
                levels = len(payload) // LEVEL_BYTES
                problem = in_deep_thread(properties_problem, payload, levels)
                if problem:
                    return on_frame((frame_type, channel, unreadable(payload, problem)))
                if isinstance(exc, RecursionError):
                    return in_deep_thread(on_frame, frame, levels)
                raise

        return on_deep_frame

    return make_deep


def properties_problem(payload: bytes) -> str:
    """Why py-amqp cannot decode the properties of a content header frame ("" if it can)."""
    class_id, _, _ = _CONTENT_HEADER.unpack_from(payload)
    try:
        amqp.Message()._load_properties(class_id, payload, _CONTENT_HEADER.size)
    except Exception as exc:  # anything a crafted property makes py-amqp's decoder raise
        return f"py-amqp cannot read its properties: {exc!r}"[:300]
    return ""


def unreadable(payload: bytes, problem: str) -> bytes:
    """A content header frame in place of ``payload``: the same class and body size, and
    for properties only the header ``UNREADABLE_HEADER``, saying ``problem``."""
    class_id, weight, body_size = _CONTENT_HEADER.unpack_from(payload)
    message = amqp.Message(application_headers={UNREADABLE_HEADER: problem})
    return _CONTENT_HEADER.pack(class_id, weight, body_size) + message._serialize_properties()


def in_deep_thread(function: Callable[[Any], Any], argument: Any, levels: int) -> Any:
    """``function(argument)`` in a thread with room for ``levels`` more nested calls; its
    result, or what it raised."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function(argument)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    limit, stack = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(limit + levels)  # the process's: this thread only waits meanwhile
    threading.stack_size(BASE_STACK + levels * STACK_PER_LEVEL)
    try:
        thread = threading.Thread(target=run, name="celery-delayq deep frame", daemon=True)
        thread.start()
        threading.stack_size(stack)
        thread.join()
    finally:
        threading.stack_size(stack)
        sys.setrecursionlimit(limit)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
