"""A road through the code, followed call by call: which of celery-delayq's functions one
call enters, in order, and how often it comes back to a module it had left.

A *stop* is one call of a function defined in ``celery_delayq`` (module, qualified name),
in the order the calls begin. Frames of Celery, kombu, redis-py or the standard library
are not stops. A *return* is a stop in a module that is already on the call stack under
a stop of another module: the road going back up to a module it had left, as when a
channel calls its diverter and the diverter calls back into the channel. A helper that
one module calls and that returns to it (a key's name, an encoding) is no return: the
road goes down and comes back by returning, not by a call back up. Leaving to Celery
or kombu and coming back to the same module is no return either.

A *revisit* is the coarser count: walking the stops in order, consecutive stops in one
module taken as one, every later stop in a module visited before counts one. It counts each
such helper too (a publish makes 9 today, most of them a key's name or an encoding), so it
is printed for information and bounded by no test.

``python -m celery_delayq.testing.roads`` prints the three roads (a delayed publish on
the Redis broker, a mover's pass, a beat's periodic pass), one line per visit, against a
redis-server of its own: what docs/explanation/design.md shows.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from types import FrameType
from typing import Any

PACKAGE = "celery_delayq"
#: Modules that are tools, not roads: this one and the rest of the testing helpers.
NOT_ROADS = ("celery_delayq.testing",)
COMPREHENSION = re.compile(r"\.<locals>\.<(?:listcomp|dictcomp|setcomp|genexpr)>$")


@dataclass
class Road:
    """The stops of one traced call, in the order they began."""

    stops: list[tuple[str, str]] = field(default_factory=list)
    #: Each call from one of our modules into another: (caller stop, callee stop).
    hops: list[tuple[tuple[str, str], tuple[str, str]]] = field(default_factory=list)
    #: The stops that went back up to a module already on the stack, in order.
    bounces: list[tuple[str, str]] = field(default_factory=list)

    @property
    def visits(self) -> list[tuple[str, list[str]]]:
        """The stops grouped by consecutive module: (module, its functions in order)."""
        grouped: list[tuple[str, list[str]]] = []
        for module, function in self.stops:
            if grouped and grouped[-1][0] == module:
                if grouped[-1][1][-1] != function:
                    grouped[-1][1].append(function)
            else:
                grouped.append((module, [function]))
        return grouped

    @property
    def modules(self) -> list[str]:
        """Every module the road passes through, first visit first."""
        return list(dict.fromkeys(module for module, _ in self.stops))

    @property
    def revisits(self) -> int:
        """Stops in a module visited before and left since (helpers included)."""
        visited = [module for module, _ in self.visits]
        return sum(module in visited[:at] for at, module in enumerate(visited))

    @property
    def returns(self) -> int:
        """Calls back up into a module already on the stack under another one."""
        return len(self.bounces)

    def lines(self) -> list[str]:
        """One line per visit: ``module: function, function`` (the package's prefix cut)."""
        cut = len(PACKAGE) + 1
        return [f"{module[cut:]}: {', '.join(functions)}" for module, functions in self.visits]


@contextmanager
def followed() -> Iterator[Road]:
    """Record the road of what runs inside the block (this thread only)."""
    road = Road()
    stack: list[tuple[FrameType, str]] = []  # our frames now running, outermost first

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "return":
            if stack and stack[-1][0] is frame:
                stack.pop()
            return
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(PACKAGE) or module.startswith(NOT_ROADS):
            return
        stop = (module, _function(frame))
        road.stops.append(stop)
        if stack and stack[-1][1] != module:
            road.hops.append(((stack[-1][1], _function(stack[-1][0])), stop))
        if stack and stack[-1][1] != module and any(m == module for _, m in stack):
            road.bounces.append(stop)
        stack.append((frame, module))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield road
    finally:
        sys.setprofile(previous)


def _function(frame: FrameType) -> str:
    """The qualified name of the function a frame runs; a comprehension's frame (one of
    its own before Python 3.12, none after) is named after the function around it."""
    code = frame.f_code
    name: str = getattr(code, "co_qualname", code.co_name)
    return COMPREHENSION.sub("", name)


def follow(call: Callable[[], object]) -> Road:
    """The road of one call."""
    with followed() as road:
        call()
    return road


def hop_lines(road: Road) -> list[str]:
    """One line per hop from one package of ours into another, the first time it is
    made: ``caller -> callee`` (module and function, the package's prefix cut). Calls
    between the modules of one package are left out: the line is for the road's shape."""
    cut = len(PACKAGE) + 1
    lines = [
        f"{a[0][cut:]}.{a[1]} -> {b[0][cut:]}.{b[1]}"
        for a, b in road.hops
        if _package(a[0]) != _package(b[0])
    ]
    return list(dict.fromkeys(lines))


def _package(module: str) -> str:
    """The package a module belongs to (itself, when it is a package's ``__init__``)."""
    spec = importlib.util.find_spec(module)
    is_package = spec is not None and spec.submodule_search_locations is not None
    return module if is_package else module.rpartition(".")[0]


def three_roads(redis_url: str) -> dict[str, Road]:
    """The publish, move and periodic roads, followed on an app of ``redis_url`` (its
    database is flushed): each the second time it is walked, so that what the first
    walk loads and caches (modules, scripts, connections) is not on it; the first
    publish's road is kept too (``first publish``), for information. Raises when a
    walk did not do its work (the move moved no message, the pass wrote nothing)."""
    import redis
    from celery.schedules import schedule

    from ..beat import Scheduler
    from ..brokers.connect import StoreConnection
    from ..config.settings import config_of
    from ..core.moving.mover import Mover
    from .apps import build_app

    redis.Redis.from_url(redis_url).flushdb()
    app = build_app(
        "roads",
        {
            "broker_url": redis_url,
            "task_default_queue": "roads",
            "delayq_periodic_horizon": 5,
            "beat_schedule": {"every-10s": {"task": "roads.noop", "schedule": schedule(10.0)}},
        },
        current=True,
    )
    task = app.task(name="roads.noop", shared=False)(_noop)
    roads: dict[str, Road] = {}
    connection: StoreConnection | None = None
    try:
        roads["first publish"] = follow(lambda: task.apply_async(countdown=60))
        roads["publish"] = follow(lambda: task.apply_async(countdown=60))

        config = config_of(app)
        connection = StoreConnection(app)
        mover = Mover(connection.open, max_sleep=config.mover_max_sleep, retry_max=1.0)
        _publish_due(task)
        mover.move_once()
        _publish_due(task)
        moved = mover.moved_total
        roads["move"] = follow(mover.move_once)
        if mover.moved_total != moved + 1:
            raise RuntimeError(f"the traced pass moved {mover.moved_total - moved}, not 1")

        store = mover.store  # the mover's: another open would close it
        assert store is not None
        scheduler = Scheduler(app, lazy=True)
        now = datetime.now(timezone.utc)
        scheduler._pass(now)  # the settings synced, the first occurrence written
        kept = store.pending_counts(["roads"])["roads"]
        roads["periodic"] = follow(lambda: scheduler._pass(now + timedelta(seconds=10)))
        if store.pending_counts(["roads"])["roads"] <= kept:
            raise RuntimeError("the traced periodic pass wrote no occurrence")
    finally:
        if connection is not None:
            connection.close()
        app.close()
    return roads


def _publish_due(task: Any) -> None:
    """Publish a message that is kept (its countdown ahead) and wait until it is due."""
    from .waiting import wait_until

    due = time.time() + 0.01
    task.apply_async(countdown=0.01)
    wait_until(lambda: time.time() > due + 0.001, what="the message due")


def _noop() -> None:
    """The roads' task: never run."""


def main(argv: list[str] | None = None) -> None:
    """Print the three roads, walked in this fresh process (on a redis-server of its own
    unless ``--url`` names one, whose database is flushed); ``--json``: as data."""
    import argparse
    import json

    from .redis_server import RedisServer

    parser = argparse.ArgumentParser(prog="python -m celery_delayq.testing.roads")
    parser.add_argument("--url")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    url, server = args.url, None
    if url is None:
        server = RedisServer().start()
        url = server.url
    try:
        roads = three_roads(url)
    finally:
        if server is not None:
            server.stop()
    if args.json:
        print(json.dumps({name: asdict(road) for name, road in roads.items()}))
        return
    for name, road in roads.items():
        counts = f"{road.returns} return(s), {road.revisits} revisit(s), {len(road.stops)} stops"
        print(f"{name}: {counts}")
        if name != "first publish":  # what a first use sets up: not a road of the page
            print("\n".join(f"    {line}" for line in hop_lines(road)))


def from_json(data: dict[str, Any]) -> Road:
    """A road as ``main --json`` printed it."""
    return Road(
        stops=[(m, f) for m, f in data["stops"]],
        hops=[((a[0], a[1]), (b[0], b[1])) for a, b in data["hops"]],
        bounces=[(m, f) for m, f in data["bounces"]],
    )


if __name__ == "__main__":
    main()
