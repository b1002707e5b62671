"""``doctor``: every check of the store's Redis and of the store itself, in one report."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery

from ..brokers.broker_health import broker_findings
from ..brokers.connect import open_store
from ..config.settings import config_of
from ..core.health.consistency import consistency_findings
from ..core.health.health_checks import (
    FAIL,
    Finding,
    clock_finding,
    dead_letter_finding,
    mover_finding,
    server_findings,
)
from ..core.health.store_status import read_status
from ..core.topology import redis_location


@dataclass(frozen=True)
class HealthReport:
    """Where the store is (password masked) and what each check found."""

    redis: str
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        """No check failed (warnings allowed)."""
        return all(finding.level != FAIL for finding in self.findings)


def doctor(
    app: Celery,
    *,
    repair: bool = False,
    read_store: bool = True,
    persistence_confirmed: bool = False,
) -> HealthReport:
    """Check Redis version, persistence, eviction policy, clock skew, movers alive and
    the store's consistency, and with ``delayq_store_url`` the dead letters, the broker
    and publisher confirms; with ``repair``, fix what is safe to fix.

    ``read_store=False`` leaves out the consistency check, which reads every key of the
    store (seconds with a million pending): the web overview shows the rest on each load.
    ``persistence_confirmed``: the operator vouches for a persistence that this Redis
    user cannot read (no CONFIG GET), which otherwise fails.
    """
    with open_store(app) as store:
        status = read_status(store, config_of(app).mover_alive_within)
        findings = [
            *server_findings(store.client, persistence_confirmed),
            clock_finding(store.client),
            mover_finding(status.alive, status.backlog, status.alive_within),
            *(consistency_findings(store, repair=repair) if read_store else []),
        ]
        if config_of(app).store_url is not None:
            findings += [dead_letter_finding(status.backlog), *broker_findings(app)]
        return HealthReport(redis_location(store.client), findings)
