"""``python -m chaos.rabbitmq [--duration SECONDS] [--rate N] [--output PATH] [--seed N]
[--cluster [--wait-replicas N]]``

With ``--cluster`` the schedule is on a Redis Cluster (chaos/rabbitmq/stores.py).

Exit status 0 when every task sent ran and no second run is unexplained; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from celery_delayq.testing import (
    LedgerReader,
    RabbitMQNode,
    celery_command,
    exit_on_termination,
    spawn,
    stop_group,
)

from ..config import REPO_ROOT
from .analysis import Outcome, analyze, render
from .app import ENV, ENV_INCARNATION
from .stores import schedule_store

LEASE = 10.0
#: Seconds without a new run, after the last ETA and a lease, before the drain gives up.
DRAIN_QUIET = 60.0


def say(message: str) -> None:
    print(f"[chaos-rmq {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Supervisor:
    """Keeps each role's process running; a killed one is started again."""

    def __init__(self, commands: dict[str, list[str]], env: dict[str, str], logs: Path):
        self.commands, self.env, self.logs = commands, env, logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.starts: Counter[str] = Counter()

    def revive(self) -> None:
        for role, command in self.commands.items():
            process = self.processes.get(role)
            if process is None or process.poll() is not None:
                self.starts[role] += 1
                incarnation = f"{role}.{self.starts[role]}"
                env = {**self.env, ENV_INCARNATION: incarnation}
                log_path = self.logs / f"{incarnation}.log"
                self.processes[role] = spawn(command, env, log_path, root=REPO_ROOT)

    def kill(self, role: str) -> None:
        process = self.processes.get(role)
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)  # all at once: they stop together
        for process in self.processes.values():
            stop_group(process, timeout=20)


def commands(run_dir: Path) -> dict[str, list[str]]:
    celery = celery_command("chaos.rabbitmq.app")
    worker = [
        *celery,
        "worker",
        "-P",
        "prefork",
        "-c",
        "2",
        "-l",
        "WARNING",
        "--without-mingle",
        "--without-gossip",
    ]
    return {
        "worker-0": [*worker, "-n", "w0@chaos"],
        "worker-1": [*worker, "-n", "w1@chaos"],
        "mover": [*celery, "delayq", "mover"],
        "beat": [
            *celery,
            "beat",
            "-S",
            "celery_delayq.beat:Scheduler",
            "-l",
            "WARNING",
            "-s",
            str(run_dir / "beat-schedule"),
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.rabbitmq")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=20.0, help="tasks sent per second")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cluster", action="store_true", help="the schedule on a cluster")
    parser.add_argument("--wait-replicas", type=int, default=0, help="with --cluster")
    args = parser.parse_args()
    exit_on_termination()
    rng = random.Random(args.seed)
    run_dir = Path(tempfile.mkdtemp(prefix="delayq-chaos-rmq-"))
    ledger_dir = run_dir / "ledger"
    ledger_dir.mkdir()
    say(f"run directory {run_dir}")
    node = RabbitMQNode()
    with schedule_store(args.cluster, rng) as store:
        node.start()
        try:
            outcome = chaos(args, rng, run_dir, ledger_dir, node, store)
        finally:
            node.stop()
    report = render(outcome, args)
    print(report)
    if args.output:
        args.output.write_text(report)
    return 0 if outcome.passed else 1


def chaos(
    args: argparse.Namespace,
    rng: random.Random,
    run_dir: Path,
    ledger_dir: Path,
    node: RabbitMQNode,
    store: Any,
) -> Outcome:
    max_countdown = min(60.0, args.duration / 2)
    settings = {
        "broker_url": node.url,
        "store_url": store.url,
        "shards": store.shards,
        "wait_replicas": args.wait_replicas,
        "ledger_dir": str(ledger_dir),
        "max_countdown": max_countdown,
        "lease": LEASE,
    }
    env = {**os.environ, ENV: json.dumps(settings)}
    supervisor = Supervisor(commands(run_dir), env, run_dir)
    supervisor.revive()
    producer = spawn(
        [sys.executable, "-m", "chaos.rabbitmq.app", str(args.rate), str(args.duration)],
        {**env, ENV_INCARNATION: "producer"},
        run_dir / "producer.log",
        root=REPO_ROOT,
    )
    actions: Counter[str] = Counter()
    next_kill = time.time() + rng.uniform(2, 5)
    faults = {"restart rabbitmq": node.restart, **store.faults()}
    restarts = {
        name: time.time() + args.duration * (0.3 + 0.25 * i / max(1, len(faults) - 1))
        for i, name in enumerate(faults)
    }
    period = max(20.0, args.duration / 4)
    try:
        while producer.poll() is None:
            supervisor.revive()
            now = time.time()
            if now >= next_kill:
                role = rng.choice(["worker-0", "worker-1", "mover", "beat"])
                supervisor.kill(role)
                actions[f"kill {role.split('-')[0]}"] += 1
                next_kill = now + rng.uniform(2, 6)
            for fault, when in restarts.items():
                if now >= when:
                    say(fault)
                    faults[fault]()
                    actions[fault] += 1
                    restarts[fault] = now + period
            time.sleep(0.2)
        say(f"producing done ({dict(actions)}); draining")
        drain(supervisor, ledger_dir, last_eta=time.time() + max_countdown + LEASE)
    finally:
        supervisor.stop_all()
    return analyze(LedgerReader(ledger_dir).poll(), actions, store.url, store.shards)


def drain(supervisor: Supervisor, ledger_dir: Path, last_eta: float) -> None:
    """Until every task sent has run, or nothing has run for a while after the last ETA."""
    reader = LedgerReader(ledger_dir)
    sent: set[str] = set()
    ended: set[str] = set()
    last_progress = time.time()
    while True:
        supervisor.revive()
        for event in reader.poll():
            if event["k"] == "S":
                sent.add(event["id"])
            elif event["k"] == "E":
                ended.add(event["id"])
                last_progress = time.time()
        if sent <= ended and time.time() > last_eta:
            return
        if time.time() > max(last_eta, last_progress) + DRAIN_QUIET:
            say(f"drain gave up: {len(sent - ended)} of {len(sent)} never ran")
            return
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main())
