"""A message the worker takes off a Redis queue but never hands to Celery must give back
every slot it took on the way: the unacked entry consume.lua wrote, the channel's
record of it, and the prefetch slot kombu's QoS counts it in (the poison guard refuses
it after that slot is taken). One slot kept per such message, and a worker whose prefetch
is that small stops taking messages for good. A real ``celery worker`` (prefetch 1, solo
and prefork) on a real Redis takes each such path many more times than its prefetch,
between good tasks: every good task runs once, every other message is dead-lettered,
and nothing is left in the queue or unacknowledged."""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import RedisServer, wait_until

from ...helpers import REMEMBER, celery_process, remember, runs

pytestmark = [
    pytest.mark.system,
    pytest.mark.timeout(180),
    pytest.mark.slow,
    pytest.mark.promise("crafted-input-stops-nothing"),
]

#: Rounds of every kind: each kind alone many times over the worker's prefetch (1).
ROUNDS = 4


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def envelope(queue: str, headers: dict[str, Any], body: str, **properties: Any) -> bytes:
    """A kombu envelope as kombu's Redis transport pushes it."""
    return json.dumps(
        {
            "body": body,
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": {
                "body_encoding": "base64",
                "delivery_tag": str(uuid.uuid4()),
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": 0,
                **properties,
            },
        }
    ).encode()


def task_headers(task_id: str, **changes: Any) -> dict[str, Any]:
    return {"id": task_id, "task": REMEMBER, "lang": "py", "argsrepr": "()", **changes}


GOOD_BODY = base64.b64encode(json.dumps([[], {"label": "poison"}, {}]).encode()).decode()

#: kind -> its message for a queue and a task id. The first five the worker's poison
#: guard refuses once kombu's QoS has counted them; the other three the consumer cannot
#: read (consume.lua's reason, kombu's message class) before any slot of kombu's.
KINDS: dict[str, Callable[[str, str], bytes]] = {
    "timelimit": lambda q, i: envelope(q, task_headers(i, timelimit=["a", {}]), GOOD_BODY),
    "stamped_headers": lambda q, i: envelope(q, task_headers(i, stamped_headers=5), GOOD_BODY),
    "task": lambda q, i: envelope(q, task_headers(i, task=[REMEMBER]), GOOD_BODY),
    "deep": lambda q, i: envelope(q, task_headers(i, x=nested(100)), GOOD_BODY),
    "body": lambda q, i: envelope(q, task_headers(i), base64.b64encode(b'["no').decode()),
    "base64": lambda q, i: envelope(q, task_headers(i), "a"),  # no base64 decodes it
    "properties": lambda q, i: json.dumps({"body": GOOD_BODY, "headers": {"id": i}}).encode(),
    "json": lambda q, i: f'{{"headers": {{"id": "{i}"}}, "body": '.encode(),
}


@pytest.mark.parametrize("pool", [["-P", "solo"], ["-P", "prefork", "-c", "1"]], ids=str)
def test_messages_never_handed_to_celery_leak_no_slot_and_good_tasks_run_after_them(
    make_app: Callable[..., Celery],
    redis_server: RedisServer,
    redis_client: redis.Redis,
    pool: list[str],
) -> None:
    app = make_app()
    queue = app.conf.task_default_queue
    settings = {"task_default_queue": queue, "worker_prefetch_multiplier": 1}
    with celery_process("worker", redis_server.url, settings, *pool) as worker:
        good = [remember(app, "good first")]
        for round_ in range(ROUNDS):
            for kind, make in KINDS.items():
                redis_client.lpush(queue, make(queue, f"poison-{kind}-{round_}"))
                good.append(remember(app, f"good after {kind} {round_}"))
        poisons = ROUNDS * len(KINDS)

        with open_store(app) as store:
            wait_until(  # a slot kept per message: the worker stops after the first few
                lambda: (
                    len(runs(redis_client)) >= len(good)
                    and len(store.dead_letters(queue)) >= poisons
                ),
                timeout=60,
                what="every good task run and every other message dead-lettered",
                abort=worker.exited,
            )
            letters = store.dead_letters(queue)
        assert worker.popen.poll() is None, worker.output

    assert Counter(run["id"] for run in runs(redis_client)) == Counter(r.id for r in good)
    kinds = Counter(re.findall(rb"poison-(\w+)-\d", letter.record.payload)[0] for letter in letters)
    assert kinds == Counter({kind.encode(): ROUNDS for kind in KINDS})
    assert "Unrecoverable error" not in worker.output
    assert redis_client.llen(queue) == 0
    assert redis_client.hlen("unacked") == 0 and redis_client.zcard("unacked_index") == 0
