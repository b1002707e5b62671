"""A chaos harness for celery-delayq: ``python -m chaos --duration SECONDS``.

Producers schedule tasks with countdowns (and retries with countdowns) and note every
task id in a ledger kept outside the Redis under test; prefork workers (acks_late on
and off) note every execution and every ack; a monkey SIGKILLs workers, beat and
standalone movers, restarts Redis, kills its client connections and pauses it. At the
end the harness waits until every due task has run and reports what was lost or run
twice, each case attributed either to Celery's own delivery semantics or to
celery-delayq (the store and its movers).

Modules, each owning one thing: ``config`` (the run's parameters and the settings its
processes share), ``ledger`` (each process's writer of the append-only event files),
``app``, ``celery_app`` and ``transport`` (the Celery app every subprocess loads, its
recording task, its receipt and ack hook), ``producer``, ``processes`` (the slots
started, SIGKILLed and restarted), ``monkey`` (the chaos actions), ``book`` (the
ledger, indexed), ``aof`` (evidence from Redis's append-only file), ``analysis`` (lost
and duplicate attribution), ``report`` (Markdown, verdict) and ``run`` (the
orchestrator).
"""
