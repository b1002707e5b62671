"""Write ``store-fixture.json``: the delayed stores as celery-delayq wrote them, to prove
that later code still delivers every record (test_format_stability.py).

Run by hand, from the repository root (RabbitMQ: a fresh vhost on ``RABBITMQ_URL``, else a
private node, as for the tests)::

    python -m tests.format.make_fixtures

Do not regenerate the committed file to make the test pass: it stands for the stores
that exist in production. Regenerate it only to add forms, with code that writes the
old ones the same way (or keep the old file next to the new one). The file names the
revision that wrote it (``written_by``); the crash and the heartbeat below use that
revision's store directly, so run this from a checkout of a revision whose modules it
imports.

It starts its own redis-server, sends messages of every record form with real Celery
apps (apps.py) through the public API, makes a hand-over mover claim one message of each
separate store and crash before its publish, lets the AMQP broker refuse one message until
it is a dead letter, writes one mover heartbeat, then dumps every key of every database
(redis_dump.py). Which record forms carry absolute instants: every record starts with
its due time (ms); the envelope's ``eta`` header is an ISO time; the page zsets score
due times and page starts; a keyed message's index entry holds when its key was first
taken; the in-flight zset holds lease deadlines, ``dead:why`` when a message died, the
heartbeats ``last_seen``. All of them lie in the past by the time the test loads the
file, so every message is due at once and every lease has run out.
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import redis
from celery import Celery

import celery_delayq
from celery_delayq.core.handover.publishing import ConfirmedOnReturn
from celery_delayq.core.moving.mover import Mover
from celery_delayq.testing import RedisServer, publish, rabbitmq_for_tests, wait_until

from .apps import BLOCKED, MISSING_EXCHANGE, TASK, make_app, queues
from .redis_dump import dump_db, write_fixture

FIXTURE = Path(__file__).with_name("store-fixture.json")
#: Databases of the stores and brokers (apps.py).
DATABASES = (0, 1, 2, 3, 4)
#: How far ahead the waiting messages are due: past by the time anyone loads them.
COUNTDOWN = 5.0
#: The claims' lease (s): run out by the time anyone loads the file.
LEASE = 1.0
NAMESPACE = uuid.UUID("6f0d3f4e-27a5-4c8e-9a51-3e2f0c1d2b27")


def task_id(label: str) -> str:
    """A fixed task id per label, so the file names the same ids on every run."""
    return str(uuid.uuid5(NAMESPACE, label))


class Crash(BaseException):
    """A mover dying between its claim and its publish."""


class CrashingPublisher(ConfirmedOnReturn):
    """A hand-over publisher whose mover dies as it starts publishing."""

    def publish_now(self, messages: Any) -> Any:
        raise Crash

    def close(self) -> None:
        pass


@contextlib.contextmanager
def opened_store(app: Celery) -> Iterator[Any]:
    """The app's delayed store (its channel's)."""
    app.set_current()
    with app.connection_for_write() as connection:
        yield connection.default_channel.delayed_store


class Fixture:
    """The messages sent so far, and what the test must see of each."""

    def __init__(self) -> None:
        self.messages: list[dict[str, str]] = []

    def send(self, app: Celery, kind: str, label: str, form: str, **options: Any) -> None:
        """Send one message that must be delivered once; ``options`` as apply_async."""
        options.setdefault("countdown", COUNTDOWN)
        options.setdefault("task_id", task_id(label))
        publish(app, TASK, label, **options)
        self.expect(kind, label, form, options["task_id"])

    def expect(self, kind: str, label: str, form: str, id_: str, dead: bool = False) -> None:
        self.messages.append({"app": kind, "label": label, "form": form, "task_id": id_})
        if dead:
            self.messages[-1]["dead"] = "yes"


def write_own(app: Celery, fixture: Fixture) -> None:
    """A Redis broker's own store: inline and prefixed records of every kind."""
    with opened_store(app) as store:  # a heartbeat of a mover that then died
        Mover(lambda: store, max_sleep=1, retry_max=1, name="fixture mover").move_once()
    fixture.send(app, "own", "own-inline", "inline record, uuid task id")
    eta = datetime.now(timezone.utc) + timedelta(seconds=COUNTDOWN)
    fixture.send(app, "own", "own-eta", "inline record, sent with eta", countdown=None, eta=eta)
    fixture.send(app, "own", "own-text-id", "inline record, text task id", task_id="fx:text-id")
    fixture.send(
        app,
        "own",
        "own-text-id-16",
        "text task id whose key is 16 bytes (\\x02)",
        task_id="format:15-chars",
    )
    for n, form in ((1, "first of two messages of a task id"), (2, "its second (\\xff key)")):
        fixture.send(app, "own", f"own-twice-{n}", form, task_id=task_id("twice"))
    fixture.send(app, "own", "own-priority", "prefixed: priority sub-list (d)", priority=6)
    expiring = queues("own")[1]
    with app.connection_for_write() as connection:  # kombu learns x-expires by declaring
        expiring(connection.default_channel).declare()
        for label, form, priority in (
            ("own-expiring", "prefixed: x-expires (x)", None),
            ("own-expiring-priority", "prefixed: priority and x-expires (d, x)", 3),
        ):
            fixture.send(
                app,
                "own",
                label,
                form,
                queue=expiring.name,
                priority=priority,
                connection=connection,
            )
    write_keyed(app, fixture, "own")
    ids = celery_delayq.schedule_many(
        app.tasks[TASK], [((f"own-many-{n}",), {}, {"countdown": COUNTDOWN}) for n in range(3)]
    )
    for n, id_ in enumerate(ids):
        fixture.expect("own", f"own-many-{n}", "inline record, stored by schedule_many", id_)


def write_keyed(app: Celery, fixture: Fixture, kind: str) -> None:
    """A debounced key (replaced once, with max_wait) and a kept one."""
    app.set_current()
    task = app.tasks[TASK]
    for label in (f"{kind}-debounced-old", f"{kind}-debounced"):
        celery_delayq.debounce(
            task,
            (label,),
            key=f"{kind}-debounce",
            countdown=COUNTDOWN,
            max_wait=COUNTDOWN * 2,
            task_id=task_id(label),
        )
    label = f"{kind}-debounced"
    fixture.expect(kind, label, "keyed (k), replaced once, max_wait", task_id(label))
    for label in (f"{kind}-capped-old", f"{kind}-capped"):  # max_wait brings it forward
        celery_delayq.debounce(
            task,
            (label,),
            key=f"{kind}-capped",
            countdown=COUNTDOWN,
            max_wait=1.0,
            task_id=task_id(label),
        )
    label = f"{kind}-capped"
    fixture.expect(kind, label, "keyed (k), due time and eta cut by max_wait", task_id(label))
    for label in (f"{kind}-kept", f"{kind}-kept-not"):
        celery_delayq.schedule_keyed(
            task,
            (label,),
            key=f"{kind}-keep",
            on_held="keep",
            countdown=COUNTDOWN,
            task_id=task_id(label),
        )
    fixture.expect(kind, f"{kind}-kept", "keyed (k), on_held=keep", task_id(f"{kind}-kept"))


def claim_and_crash(app: Celery, fixture: Fixture, kind: str, label: str, queue: str) -> None:
    """Send a message to ``queue`` (its only one), claim it once due and die before
    publishing it: a hand-over in flight."""
    fixture.send(app, kind, label, "claimed by a mover that died", queue=queue, countdown=0.1)
    with opened_store(app) as store:
        wait_until(
            lambda: any(b.overdue for b in store.backlog() if b.queue == queue),
            what=f"the message of {queue} is due",
        )
        store.handover._publisher = CrashingPublisher()  # type: ignore[attr-defined]
        with contextlib.suppress(Crash):
            store.move_due(queue)
        assert sum(b.in_flight for b in store.backlog() if b.queue == queue) == 1


def write_prefixed(app: Celery, fixture: Fixture) -> None:
    """A Redis broker's own store under kombu's global_keyprefix and a key prefix."""
    fixture.send(app, "prefixed", "pre-inline", "inline record, prefixed keys")
    fixture.send(app, "prefixed", "pre-priority", "prefixed: priority sub-list (d)", priority=3)


def write_separate(app: Celery, fixture: Fixture) -> None:
    """A store apart from the Redis broker, in shards, and a claimed hand-over."""
    for n in range(6):
        fixture.send(app, "separate", f"sep-{n}", "inline record in a shard")
    fixture.send(app, "separate", "sep-priority", "prefixed: priority sub-list (d)", priority=9)
    write_keyed(app, fixture, "separate")
    claim_and_crash(app, fixture, "separate", "sep-inflight", "fx-sep-inflight")

    def block() -> None:  # the queue's list is taken by a string (a publish declares it)
        with app.connection_for_write() as connection:
            broker = redis.Redis(connection_pool=connection.default_channel.pool)
            broker.set(BLOCKED, "not a list")

    refuse_until_dead(app, fixture, "separate", "sep-dead", BLOCKED, block, queue=BLOCKED)


def write_amqp(app: Celery, fixture: Fixture) -> None:
    """A store for RabbitMQ: exchange and routing key as destination; a claimed
    hand-over; a message the broker refused (its exchange is missing) until it died."""
    fixture.send(app, "amqp", "amqp-1", "prefixed: exchange and routing key (d)")
    fixture.send(app, "amqp", "amqp-priority", "prefixed (d), priority property", priority=5)
    write_keyed(app, fixture, "amqp")
    claim_and_crash(app, fixture, "amqp", "amqp-inflight", "fx-amqp-inflight")
    refuse_until_dead(
        app,
        fixture,
        "amqp",
        "amqp-dead",
        "fx-dead",
        lambda: None,  # its exchange is missing already
        exchange=MISSING_EXCHANGE,
        routing_key="fx-dead",
    )


def refuse_until_dead(
    app: Celery,
    fixture: Fixture,
    kind: str,
    label: str,
    stored_as: str,
    block: Callable[[], None],
    **options: Any,
) -> None:
    """Send a message, the only one of its store queue ``stored_as``, ``block`` its
    destination, and hand it over once due until it is a dead letter (one try allowed)."""
    publish(app, TASK, label, task_id=task_id(label), countdown=0.1, **options)
    block()
    with opened_store(app) as store:

        def died() -> bool:
            store.move_due(stored_as)
            return any(letter.queue == stored_as for letter in store.dead_letters())

        wait_until(died, what=f"the broker refused {label}")
    fixture.expect(kind, label, "dead letter (the broker refused it)", task_id(label), dead=True)


def revision() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip()


def main() -> None:
    fixture = Fixture()
    with RedisServer() as server, rabbitmq_for_tests() as vhost:
        base = f"redis://127.0.0.1:{server.port}"
        write_own(make_app("own", base), fixture)
        write_prefixed(make_app("prefixed", base), fixture)
        separate = make_app("separate", base, delayq_handover_tries=1, delayq_handover_lease=LEASE)
        write_separate(separate, fixture)
        amqp = make_app(
            "amqp",
            base,
            vhost,
            delayq_handover_tries=1,
            delayq_handover_lease=LEASE,
            task_queues=queues("amqp", with_dead=False),  # its exchange stays missing
        )
        write_amqp(amqp, fixture)
        clients = {db: redis.Redis(port=server.port, db=db) for db in DATABASES}
        version = clients[0].info("server")["redis_version"]
        written = {
            "about": __doc__.split("\n\n")[0].replace("\n", " "),
            "written_by": {"celery_delayq": revision(), "redis": version},
            "messages": fixture.messages,
            "databases": {str(db): dump_db(client) for db, client in clients.items()},
        }
    write_fixture(FIXTURE, written)
    print(f"wrote {FIXTURE}: {len(fixture.messages)} messages")


if __name__ == "__main__":
    main()
