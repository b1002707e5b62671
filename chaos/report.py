"""The run's report in Markdown, and the verdict that decides the exit status."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import analysis
from .analysis import Outcome, summary
from .book import Book
from .config import (
    ETA_TAIL,
    MIN_COUNTDOWN,
    PERIODIC_EVERY,
    RETRY_WEIGHTS,
    UNACKED_MUTEX_EXPIRE,
    RunOptions,
)


@dataclass
class RunContext:
    """What the orchestrator knows besides the ledger."""

    options: RunOptions
    command: str
    started: str  # ISO 8601, UTC
    versions: dict[str, str]
    startup_seconds: float = 0.0
    producing_seconds: float = 0.0
    drain_seconds: float = 0.0
    settled: bool = False
    planned: Counter[str] = field(default_factory=Counter)
    log_errors: Counter[str] = field(default_factory=Counter)
    unreadable_ledger_lines: int = 0
    aof_bytes: int = 0
    #: Redis command -> (calls, seconds), since the last Redis restart.
    commandstats: dict[str, tuple[int, float]] = field(default_factory=dict)
    run_dir: str = ""


@dataclass(frozen=True)
class Check:
    name: str
    required: str
    got: int
    ok: bool


def checks(outcome: Outcome, options: RunOptions) -> list[Check]:
    """What must hold for the run to pass (the exit status is non-zero otherwise)."""
    minimums = options.minimums
    kills = sum(outcome.kills.values())
    return [
        Check(
            "tasks scheduled",
            f">= {minimums.tasks:,}",
            outcome.scheduled,
            outcome.scheduled >= minimums.tasks,
        ),
        Check(
            "SIGKILLs (workers, beat, movers)",
            f">= {minimums.kills}",
            kills,
            kills >= minimums.kills,
        ),
        Check(
            "Redis restarts",
            f">= {minimums.redis_restarts}",
            outcome.redis_restarts,
            outcome.redis_restarts >= minimums.redis_restarts,
        ),
        Check(
            "lost by celery-delayq (store, movers, consume) or unexplained",
            "0",
            outcome.lost_against_us,
            outcome.lost_against_us == 0,
        ),
        Check(
            "duplicates caused by the store or movers, or unexplained",
            "0",
            outcome.duplicates_against_us,
            outcome.duplicates_against_us == 0,
        ),
        Check(
            "periodic occurrences run (1-second entry, 2 beats)",
            f">= {minimums.periodic_runs}",
            outcome.periodic.ran,
            outcome.periodic.ran >= minimums.periodic_runs,
        ),
        Check(
            "periodic occurrences missed, or sent twice",
            "0",
            len(outcome.periodic.missed) + len(outcome.periodic.sent_twice),
            not outcome.periodic.missed and not outcome.periodic.sent_twice,
        ),
        Check(
            "messages pushed onto the queue list twice (AOF)",
            "0",
            outcome.handed_over_again,
            outcome.handed_over_again == 0,
        ),
    ]


def passed(outcome: Outcome, options: RunOptions) -> bool:
    return all(check.ok for check in checks(outcome, options))


def render(outcome: Outcome, book: Book, context: RunContext) -> str:
    options = context.options
    verdict = "PASS" if passed(outcome, options) else "FAIL"
    parts = [
        f"# Chaos run: {verdict}",
        "",
        f"`{context.command}`, started {context.started}.",
        "",
        "## Verdict",
        "",
        "| check | required | got | |",
        "|---|---:|---:|---|",
        *(
            f"| {c.name} | {c.required} | {c.got:,} | {'ok' if c.ok else '**FAIL**'} |"
            for c in checks(outcome, options)
        ),
        "",
        *_configuration(context),
        *_counts(outcome, context),
        *_causes("Lost, by cause", outcome.lost, outcome),
        *_causes("Duplicates, by cause", outcome.duplicates, outcome),
        *_chaos(outcome, book, context),
        *_periodic(outcome),
        *_lateness(outcome),
        *_redis_load(context),
        *_errors(context),
        *_method(),
    ]
    return "\n".join(parts).rstrip() + "\n"


def _configuration(context: RunContext) -> list[str]:
    o = context.options
    late_on = sum(o.acks_late)
    versions = ", ".join(f"{name} {version}" for name, version in context.versions.items())
    drain = f"{context.drain_seconds:.0f} s, " + (
        "settled: no live worker holds an unfinished task, and Redis holds nothing delayed, "
        "queued or unacked"
        if context.settled
        else "**timed out before everything settled**"
    )
    return [
        "## Configuration",
        "",
        f"- {o.duration:.0f} s of producing and chaos (seed {o.seed}), after "
        f"{context.startup_seconds:.0f} s of start-up; final drain {drain}.",
        f"- {o.producers} producers, {o.rate:.0f} tasks/s together; countdowns (or absolute "
        f"`eta`, half of the tasks) log-uniform from {MIN_COUNTDOWN} s to "
        f"{o.max_countdown:.0f} s, cut so no ETA falls later than {ETA_TAIL:.0f} s after "
        f"producing stops; {1 - RETRY_WEIGHTS[0]:.0%} of tasks retry once or twice with "
        "`self.retry(countdown=...)` from the same range.",
        f"- {len(o.acks_late)} prefork workers (concurrency {o.concurrency}): {late_on} with "
        f"`task_acks_late`, {len(o.acks_late) - late_on} without; prefetch multiplier "
        f"{o.prefetch_multiplier}; `visibility_timeout` {o.visibility_timeout:.0f} s, "
        f"`unacked_restore_interval` {o.restore_interval:.0f} s, `unacked_mutex_expire` "
        f"{UNACKED_MUTEX_EXPIRE} s "
        "(kombu's default, 300 s, stops all redeliveries for 5 minutes whenever a worker dies "
        "holding its restore lock).",
        f"- Movers: a thread in {min(o.worker_movers, len(o.acks_late))} of the workers, one "
        "in each of two beats (`celery_delayq.beat:Scheduler`), one standalone "
        "(`celery delayq mover`); `delayq_mover_retry_max` 2 s.",
        "- Redis: `appendonly yes`, `appendfsync always`, no automatic AOF rewrite; restarted "
        "on the same port.",
        f"- Versions: {versions}.",
        "",
    ]


def _periodic(outcome: Outcome) -> list[str]:
    found = outcome.periodic
    lines = [
        "## The periodic entry",
        "",
        f"A {PERIODIC_EVERY:g}-second entry in `beat_schedule`, written ahead by two beats "
        "(`celery_delayq.beat:Scheduler`) that the monkey kills with the rest; paused when "
        "producing stops, so the store drains. Between its first run and its last: "
        f"{found.occurrences:,} occurrences, {found.ran:,} run, {len(found.missed)} missed, "
        f"{len(found.sent_twice)} sent twice (two task ids for one occurrence); "
        f"{found.redelivered} runs again of one task id (redelivered by the broker, Celery's "
        f"at-least-once); the latest first run {found.latest_first_run:.1f} s after its "
        "occurrence.",
        "",
    ]
    for title, listed in (("Missed", found.missed), ("Sent twice", found.sent_twice)):
        if listed:
            lines += [f"{title}: {', '.join(listed[:10])}", ""]
    return lines


def _counts(outcome: Outcome, context: RunContext) -> list[str]:
    rows = [
        ("tasks scheduled (`apply_async` returned)", outcome.scheduled),
        ("publishes that raised (not counted as scheduled)", outcome.publish_failed),
        ("retries published (`self.retry` raised `Retry`)", outcome.retries_published),
        ("retry publishes that raised", outcome.retry_publish_failed),
        ("messages expected (tasks + retries)", outcome.expected),
        ("executions", outcome.executions),
        ("  of which under acks_late", outcome.executions_acks_late),
        ("messages completed", outcome.completed),
        ("lost", sum(outcome.lost.values())),
        ("  by celery-delayq (store, movers, consume) or unexplained", outcome.lost_against_us),
        ("duplicate executions", sum(outcome.duplicates.values())),
        ("  by the store or movers, or unexplained", outcome.duplicates_against_us),
        ("messages run that no confirmed publish accounts for", outcome.unconfirmed_executed),
        ("received by a worker (its consume returned it)", outcome.receipts),
        ("  whose unacked entry could not be written", outcome.unacked_write_failures),
        ("acks and rejects that reached Redis", outcome.acks_ok),
        ("acks and rejects that failed", outcome.acks_failed),
        ("unreadable ledger lines", context.unreadable_ledger_lines),
        ("messages pushed onto the queue list, not as redeliveries (AOF)", outcome.handed_over),
        ("  more than once (extra pushes of one delivery tag)", outcome.handed_over_again),
        ("messages looked up in Redis's AOF", outcome.evidence_lookups),
        ("AOF bytes (every change Redis acknowledged)", context.aof_bytes),
    ]
    if outcome.injected or context.options.inject_faults:
        rows += [
            ("faults injected: delayed publishes dropped", outcome.injected["drop"]),
            ("faults injected: delayed publishes also pushed at once", outcome.injected["double"]),
        ]
    return [
        "## Counts",
        "",
        "| | count |",
        "|---|---:|",
        *(f"| {name} | {value:,} |" for name, value in rows),
        "",
    ]


def _causes(title: str, counts: Counter[str], outcome: Outcome) -> list[str]:
    lines = [f"## {title}", ""]
    if not counts:
        return [*lines, "None.", ""]
    lines += ["| cause | count | whose | examples |", "|---|---:|---|---|"]
    for cause, count in counts.most_common():
        owner, label = cause.split(": ", 1)
        whose = {"ours": "**celery-delayq**", "unexplained": "**unexplained**"}.get(owner, owner)
        examples = "<br>".join(f"`{e}`" for e in outcome.examples.get(cause, [])[:3])
        lines.append(f"| {label} | {count:,} | {whose} | {examples} |")
    return [*lines, ""]


def _chaos(outcome: Outcome, book: Book, context: RunContext) -> list[str]:
    restarts = Counter(a.get("how") for a in book.actions if a["ev"] == "redis-restart")
    client_kills = [a for a in book.actions if a["ev"] == "client-kill"]
    by_how = Counter(a["how"] for a in client_kills)
    connections = sum(a["n"] for a in client_kills)
    pauses = [a for a in book.actions if a["ev"] == "client-pause"]
    sleeps = [a for a in book.actions if a["ev"] == "debug-sleep"]
    rows = [
        ("SIGKILL worker (with its pool children)", outcome.kills["worker"]),
        ("SIGKILL beat", outcome.kills["beat"]),
        ("SIGKILL standalone mover", outcome.kills["mover"]),
        ("Redis restart, SIGKILL", restarts["SIGKILL"]),
        ("Redis restart, SIGTERM", restarts["SIGTERM"]),
        (
            f"CLIENT KILL ({', '.join(f'{h}: {n}' for h, n in sorted(by_how.items()))}); "
            f"{connections} connections",
            len(client_kills),
        ),
        (
            f"CLIENT PAUSE ALL/WRITE, {sum(p['ms'] for p in pauses) / 1000:.1f} s in all",
            len(pauses),
        ),
        (f"DEBUG SLEEP, {sum(s['s'] for s in sleeps):.1f} s in all", len(sleeps)),
        ("kills skipped (no ready target)", outcome.actions["kill-skipped"]),
        ("actions that failed", outcome.actions["action-failed"]),
    ]
    lines = [
        "## Chaos",
        "",
        "| action | count |",
        "|---|---:|",
        *(f"| {name} | {value:,} |" for name, value in rows),
        "",
    ]
    failed = [a for a in book.actions if a["ev"] == "action-failed"]
    lines += [f"- action failed: {a['action']}: `{a['e']}`" for a in failed[:5]]
    if outcome.crashes:
        lines.append(f"- processes that exited on their own: {', '.join(outcome.crashes)}")
    else:
        lines.append("- No process exited on its own; every exit was a SIGKILL or the final stop.")
    return [*lines, ""]


def _lateness(outcome: Outcome) -> list[str]:
    def row(name: str, values: list[float]) -> str:
        s = summary(values)
        cells = [_seconds(s[k]) for k in ("p50", "p99", "max")]
        return f"| {name} | {s['n']:,} | " + " | ".join(cells) + " |"

    return [
        "## Lateness (execution start − ETA)",
        "",
        "| deliveries | n | p50 | p99 | max |",
        "|---|---:|---:|---:|---:|",
        row("first deliveries", outcome.lateness_first),
        row("  ETA → a worker's consume got it (movers, queue list)", outcome.lateness_to_receipt),
        row("  consume → the task's first line (worker, pool)", outcome.lateness_in_worker),
        row("kombu redeliveries (after the visibility timeout)", outcome.lateness_redelivered),
        "",
        "First deliveries include tasks that came due while Redis was down, paused or "
        "sleeping, or while no worker was free; no target is set.",
        "",
    ]


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.2f} s"


def _redis_load(context: RunContext) -> list[str]:
    stats = sorted(context.commandstats.items(), key=lambda item: -item[1][0])[:10]
    if not stats:
        return []
    return [
        "## Redis commands since its last restart (top 10 by calls)",
        "",
        "| command | calls | Redis time |",
        "|---|---:|---:|",
        *(f"| {name} | {calls:,} | {_seconds(seconds)} |" for name, (calls, seconds) in stats),
        "",
    ]


def _errors(context: RunContext) -> list[str]:
    lines = ["## Errors logged by the processes", ""]
    if not context.log_errors:
        return [*lines, "None.", ""]
    lines += ["| count | line (numbers and ids masked) |", "|---:|---|"]
    for line, count in context.log_errors.most_common(12):
        lines.append(f"| {count:,} | `{line.replace('|', '/')}` |")
    return [*lines, ""]


def _method() -> list[str]:
    doc = analysis.__doc__ or ""
    body = doc.split("\n\n", 1)[1] if "\n\n" in doc else doc
    return ["## How losses and duplicates are attributed", "", body.strip(), ""]


_MASKS = [
    (re.compile(r"^\[[^\]]*\]\s*"), ""),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<id>"),
    (re.compile(r"0x[0-9a-f]+"), "<addr>"),
    (re.compile(r"\d+(\.\d+)?"), "N"),
]


def log_errors(log_dir: Path) -> Counter[str]:
    """Warning-and-worse lines and exception lines of every process log, masked so alike
    lines count together."""
    counts: Counter[str] = Counter()
    for path in log_dir.glob("*.log"):
        for raw in path.read_text(errors="replace").splitlines():
            if not re.search(r"ERROR|CRITICAL|Traceback|^\w+(Error|Exception):", raw):
                continue
            line = raw.strip()
            for pattern, replacement in _MASKS:
                line = pattern.sub(replacement, line)
            counts[line[:160]] += 1
    return counts
