"""Limit keys: each key of a task gets its own bucket with the task's limits, whether the
key comes with the call (the ``delayq_limit_key`` header) or from an argument (the task
option ``delayq_limit_key``). A real worker on a real Redis."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict

import pytest

from celery_delayq.config.limits import LIMIT_KEY_HEADER
from celery_delayq.core.layout.gates import split_bucket
from celery_delayq.testing import wait_until
from celery_delayq.testing.releases import most_in_window, release_log

from ..helpers import celery_process, runs
from .test_global_rate_limits import DEFAULT

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

PER_CUSTOMER = "tests.worker_app.per_customer"


@pytest.mark.promise("flow-limit-keys", "flow-rate-never-more")
def test_each_customer_gets_its_own_bucket(make_app, redis_server, redis_client):
    app = make_app()

    @app.task(
        name=PER_CUSTOMER, shared=False, delayq_rate_limit="2/s", delayq_limit_key="customer_id"
    )
    def per_customer(customer_id: str, label: str = "") -> None:
        """The worker's task, limited to 2/s per customer."""

    with celery_process("worker", redis_server.url, {}, "-P", "solo"):
        for number in range(6):  # customer a's backlog first, by position
            per_customer.delay("a", str(number))
        for number in range(4):  # then b's, by keyword
            per_customer.apply_async(kwargs={"customer_id": "b", "label": str(number)})
        # a key the caller gives is kept
        per_customer.apply_async(("a", "given"), headers={LIMIT_KEY_HEADER: "c"})
        wait_until(lambda: len(runs(redis_client)) == 11, timeout=40, what="11 runs")

    releases: dict[str | None, list[int]] = {}
    for bucket, times in release_log(redis_client, DEFAULT).items():
        task, key = split_bucket(bucket)
        assert task == PER_CUSTOMER
        releases[key] = times
    assert {key: len(times) for key, times in releases.items()} == {"a": 6, "b": 4, "c": 1}
    for times in releases.values():  # each customer's limit holds
        assert most_in_window(times, 1_000_000) <= 2
    # b's calls did not queue behind a's backlog: b's first release came before a's last
    assert min(releases["b"]) < max(releases["a"])
    # and the buckets were released side by side, more than one limit's worth at once
    assert most_in_window([at for times in releases.values() for at in times], 1_000_000) > 2
    started = defaultdict(list)
    for run in runs(redis_client):
        started[run["customer"]].append(run["label"])
    assert sorted(started["a"]) == sorted([*map(str, range(6)), "given"])
    assert sorted(started["b"]) == [*map(str, range(4))]


#: A publisher in a process of its own: whether bulk templates apply after a publish of a
#: task without the option, then after a task with it is declared and a connection made.
CONNECTS_LAZILY = """
import sys
from celery_delayq.scheduling.templates import templates_apply
from celery_delayq.testing import build_app

app = build_app("publisher", {"broker_url": sys.argv[1]})

@app.task(name="tests.flow.plain", delayq_rate_limit="2/s")
def plain(customer_id): pass

plain.delay("a")
print(templates_apply(app))

@app.task(name="tests.flow.keyed", delayq_rate_limit="2/s", delayq_limit_key="customer_id")
def keyed(customer_id): pass

with app.connection_for_write() as connection:
    connection.transport  # a new transport looks at the app's tasks again
print(templates_apply(app))
"""


def test_the_receiver_is_connected_only_once_a_task_takes_its_key_from_an_argument(
    redis_server, redis_client
):
    """Bulk scheduling's templates stay in use while no task needs the receiver."""
    ran = subprocess.run(
        [sys.executable, "-c", CONNECTS_LAZILY, redis_server.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert ran.stdout.split() == ["True", "False"]
