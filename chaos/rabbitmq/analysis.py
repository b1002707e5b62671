"""From the ledger to the verdict: tasks lost (and where they are), second runs by cause."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from celery_delayq.brokers.common.separate_store import store_client
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.layout.record import task_key

from .app import QUEUE

REDELIVERED = "RabbitMQ redelivery (acks_late: worker killed or its connection lost mid-run)"
PUBLISH_RETRY = "producer publish retried after an error (Celery's at-least-once)"
HANDOVER = "hand-over claim -> ack window: a mover killed or cut off after the confirm (ours)"
UNEXPLAINED = "unexplained"


@dataclass
class Outcome:
    sent: int = 0
    failed_publishes: int = 0
    runs: int = 0
    lost: dict[str, int] = field(default_factory=dict)  # where the lost ones are
    duplicates: Counter[str] = field(default_factory=Counter)  # extra runs by cause
    actions: Counter[str] = field(default_factory=Counter)

    @property
    def passed(self) -> bool:
        return not self.lost and not self.duplicates[UNEXPLAINED]


def analyze(
    events: list[dict[str, Any]], actions: Counter[str], store_url: str, shards: int = 1
) -> Outcome:
    sent = {e["id"] for e in events if e["k"] == "S"}
    retried = {e["id"] for e in events if e["k"] == "P"}
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event["k"] == "E":
            runs[event["id"]].append(event)
    outcome = Outcome(
        sent=len(sent),
        failed_publishes=sum(1 for e in events if e["k"] == "F"),
        runs=sum(len(r) for r in runs.values()),
        actions=actions,
    )
    missing = sorted(sent - runs.keys())
    if missing:
        outcome.lost = where(missing, store_url, shards)
    for task_id, task_runs in runs.items():
        for extra in task_runs[1:]:
            outcome.duplicates[cause(task_id, task_runs[0], extra, retried)] += 1
    return outcome


def cause(task_id: str, first: dict[str, Any], extra: dict[str, Any], retried: set[str]) -> str:
    if extra["rd"]:
        return REDELIVERED
    if task_id in retried:
        return PUBLISH_RETRY
    if extra["xid"] is not None and extra["xid"] == first["xid"]:
        return HANDOVER
    return UNEXPLAINED


def where(task_ids: list[str], store_url: str, shards: int) -> dict[str, int]:
    """Where the tasks that never ran are: still in the store (pending or in flight), in
    its dead letters, or nowhere (lost)."""
    client = store_client(store_url)
    keys = KeySpace(shards=shards)
    found: Counter[str] = Counter()
    for task_id in task_ids:
        key = task_key(task_id)
        shard = keys.shard_of(QUEUE, key)
        if client.hexists(shard.messages, key):  # in flight too: a claim keeps its record
            found["still pending in the store (ours)"] += 1
        elif client.hexists(shard.dead, key):
            found["dead letters (ours)"] += 1
        else:
            found["nowhere (lost)"] += 1
    return dict(found)


def render(outcome: Outcome, args: Any) -> str:
    rows = [
        (
            "tasks sent (apply_async returned) / publishes that failed",
            f"{outcome.sent:,} / {outcome.failed_publishes}",
        ),
        ("runs", f"{outcome.runs:,}"),
        *((f"chaos: {action}", str(count)) for action, count in sorted(outcome.actions.items())),
        ("tasks that never ran", str(sum(outcome.lost.values()))),
        *((f"  of which: {place}", str(n)) for place, n in sorted(outcome.lost.items())),
        *((f"second runs: {why}", str(n)) for why, n in sorted(outcome.duplicates.items())),
    ]
    table = "\n".join(f"| {label} | {value} |" for label, value in rows)
    verdict = "PASSED" if outcome.passed else "FAILED"
    command = (
        f"python -m chaos.rabbitmq --duration {args.duration:g} --rate {args.rate:g} "
        f"--seed {args.seed}"
    )
    if args.cluster:
        command += f" --cluster --wait-replicas {args.wait_replicas}"
        store = (
            "a Redis Cluster for the schedule (3 masters with a replica each, 8 shards per "
            f"queue, delayq_store_wait_replicas={args.wait_replicas}); the monkey SIGKILLs "
            "workers, movers and beat, restarts RabbitMQ (graceful), SIGKILLs a master "
            "(its replica takes over; the old master rejoins as a replica) and moves the "
            "slot of a queue shard to another master under load."
        )
    else:
        store = (
            "a Redis (AOF, fsync always) for the schedule; the monkey SIGKILLs workers, "
            "movers and beat and restarts RabbitMQ (graceful) and Redis (SIGKILL)."
        )
    return (
        f"# Chaos on RabbitMQ: {verdict}\n\n"
        f"`{command}`: a producer, two prefork workers (acks_late, worker movers), beat "
        "with celery-delayq's scheduler and a standalone mover; a private RabbitMQ node "
        f"and {store}\n\n"
        "| | count |\n|---|---:|\n" + table + "\n"
    )
