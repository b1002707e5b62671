"""pytest plugin: run Celery's own integration suite with the celery-delayq transport.

Load it with ``-p celery_suite_transport`` (``tools/`` on ``PYTHONPATH``), after
``-p celery.contrib.pytest``. It overrides ``celery_parameters``, the fixture
``celery.contrib.pytest`` documents for changing the test app's init parameters, so the
test apps (session and per-test) and the in-process session worker all select
``celery_delayq.transport:Transport``. Celery's suite itself is not changed.

Nothing else is needed for the in-process worker to move due messages: Celery's
``WorkController`` sends ``worker_init`` (in ``setup_instance``), which adds the mover
bootstep, as in a ``celery worker`` process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

TRANSPORT = "celery_delayq.transport:Transport"


@pytest.fixture(scope="session")
def celery_parameters() -> Mapping[str, Any]:
    """Init parameters of every test app: our transport (``Celery(broker_transport=...)``
    outranks the ``celery_config`` mapping, which the suite's conftest owns)."""
    return {"broker_transport": TRANSPORT}


@pytest.fixture(scope="session", autouse=True)
def _delayq_transport_in_use(celery_session_app: Any) -> None:
    """Fail loudly if the override did not take (the run would silently be a plain one)."""
    from celery_delayq.brokers.common.diverter import uses_delayq

    assert uses_delayq(celery_session_app), celery_session_app.conf.broker_transport


def pytest_report_header() -> str:
    return f"celery-delayq: broker_transport = {TRANSPORT}"
