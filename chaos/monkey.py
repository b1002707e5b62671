"""The monkey: a timeline of chaos actions drawn from the seed, carried out in a thread.

Actions: SIGKILL a worker (with its pool children), beat or the standalone mover;
restart Redis (SIGKILL or SIGTERM, a pause, then the same port and AOF directory);
``CLIENT KILL`` (all normal clients, all pub/sub clients, or one random connection);
``CLIENT PAUSE`` (all commands, or writes only); ``DEBUG SLEEP``. How many of each is
planned from the duration so that the run's minimums are met with room to spare, at
uniformly random moments, so the intervals between actions are random.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from celery_delayq.testing import (
    BEAT,
    MOVER,
    WORKER,
    LedgerWriter,
    RedisServer,
    WaitAborted,
    wait_until,
)

from .config import Minimums
from .processes import ChaosSlot

KILL_WORKER, KILL_BEAT, KILL_MOVER = "kill-worker", "kill-beat", "kill-mover"
REDIS_RESTART, CLIENT_KILL, CLIENT_PAUSE, DEBUG_SLEEP = (
    "redis-restart",
    "client-kill",
    "client-pause",
    "debug-sleep",
)
#: How long a kill waits for a ready target (all of that role may be restarting).
TARGET_WAIT_SECONDS = 10.0
#: Redis stays down this long (uniform) between stop and start.
REDIS_DOWNTIME = (0.0, 2.0)
PAUSE_MS = (200, 2000)
SLEEP_SECONDS = (0.2, 2.0)


@dataclass(frozen=True)
class Step:
    at: float  # seconds after the monkey starts
    action: str


def plan(duration: float, minimums: Minimums, rng: random.Random) -> list[Step]:
    """The run's actions: kills at 1.5 times the minimum (70 % workers, the rest beat and
    the standalone mover), a Redis restart or more per 2 minutes, and a connection kill,
    a pause and a sleep about every 20 s."""
    kills = math.ceil(1.5 * minimums.kills)
    side_kills = max(1, round(0.15 * kills))
    counts = {
        KILL_WORKER: kills - 2 * side_kills,
        KILL_BEAT: side_kills,
        KILL_MOVER: side_kills,
        REDIS_RESTART: max(
            minimums.redis_restarts + 1 if duration >= 300 else 1, math.ceil(duration / 120)
        ),
        CLIENT_KILL: max(1, round(duration / 20)),
        CLIENT_PAUSE: max(1, round(duration / 25)),
        DEBUG_SLEEP: max(1, round(duration / 25)),
    }
    # Leave the first and last few seconds calm: start-up, and the end of producing.
    margin = min(5.0, duration / 10)
    steps = [
        Step(rng.uniform(margin, duration - margin), action)
        for action, count in counts.items()
        for _ in range(count)
    ]
    return sorted(steps, key=lambda step: step.at)


class Monkey:
    """Carries out a plan against the run's slots and Redis; notes every action done."""

    def __init__(
        self,
        steps: list[Step],
        slots: list[ChaosSlot],
        server: RedisServer,
        ledger: LedgerWriter,
        rng: random.Random,
    ) -> None:
        self.steps = steps
        self.slots = slots
        self.server = server
        self.ledger = ledger
        self.rng = rng
        self.last_disruption = 0.0  # epoch seconds of the last action that hit Redis
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-monkey", daemon=True)
        self._actions: dict[str, Callable[[], None]] = {
            KILL_WORKER: lambda: self._kill(WORKER),
            KILL_BEAT: lambda: self._kill(BEAT),
            KILL_MOVER: lambda: self._kill(MOVER),
            REDIS_RESTART: self._restart_redis,
            CLIENT_KILL: self._client_kill,
            CLIENT_PAUSE: self._client_pause,
            DEBUG_SLEEP: self._debug_sleep,
        }

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()

    def _run(self) -> None:
        for step in self.steps:
            if self._stop.wait(max(0.0, self._started + step.at - time.monotonic())):
                return
            try:
                self._actions[step.action]()
            except Exception as exc:  # noqa: BLE001 - a failed action is noted, not fatal
                self.ledger.write(
                    "X",
                    ev="action-failed",
                    action=step.action,
                    e=f"{type(exc).__name__}: {exc}"[:200],
                )

    def _kill(self, role: str) -> None:
        """SIGKILL a ready process of ``role``, waiting a while for one (all of that role
        may be restarting); noted as skipped if none comes."""
        try:
            ready = wait_until(
                lambda: [slot for slot in self.slots if slot.role == role and slot.ready()],
                timeout=TARGET_WAIT_SECONDS,
                interval=0.2,
                what=f"a {role} is ready",
                abort=lambda: "the monkey stops" if self._stop.is_set() else None,
            )
        except WaitAborted:
            return
        except TimeoutError:
            self.ledger.write("X", ev="kill-skipped", role=role)
            return
        self.rng.choice(ready).kill()

    def _admin(self) -> redis.Redis:
        return redis.Redis(port=self.server.port, socket_timeout=10, socket_connect_timeout=2)

    def _disrupted(self) -> None:
        self.last_disruption = time.time()

    def _restart_redis(self) -> None:
        kill = self.rng.random() < 0.5
        downtime = self.rng.uniform(*REDIS_DOWNTIME)
        self._disrupted()
        self.ledger.write(
            "X", ev=REDIS_RESTART, how="SIGKILL" if kill else "SIGTERM", down=round(downtime, 3)
        )
        self.server.stop(kill=kill)
        time.sleep(downtime)
        self.server.start(timeout=60)
        self.ledger.write("X", ev="redis-up")
        self._disrupted()

    def _client_kill(self) -> None:
        """Every normal connection (all the run's processes), every pub/sub connection
        (the movers' wake-ups), or one connection at random; never the monkey's own."""
        how = self.rng.choice(["TYPE normal", "TYPE pubsub", "ID"])
        with self._admin() as admin:
            if how == "ID":
                me = admin.client_id()
                ids = [c["id"] for c in admin.client_list() if int(c["id"]) != me]
                if not ids:
                    return
                killed = admin.execute_command("CLIENT", "KILL", "ID", self.rng.choice(ids))
            else:
                killed = admin.execute_command("CLIENT", "KILL", *how.split())
        self._disrupted()
        self.ledger.write("X", ev=CLIENT_KILL, how=how, n=int(killed))

    def _client_pause(self) -> None:
        ms = self.rng.randint(*PAUSE_MS)
        mode = self.rng.choice(["ALL", "WRITE"])
        with self._admin() as admin:
            admin.execute_command("CLIENT", "PAUSE", ms, mode)
        self._disrupted()
        self.ledger.write("X", ev=CLIENT_PAUSE, ms=ms, mode=mode)
        time.sleep(ms / 1000)

    def _debug_sleep(self) -> None:
        seconds = round(self.rng.uniform(*SLEEP_SECONDS), 2)
        self._disrupted()
        self.ledger.write("X", ev=DEBUG_SLEEP, s=seconds)
        with self._admin() as admin:
            admin.execute_command("DEBUG", "SLEEP", seconds)
        self._disrupted()
