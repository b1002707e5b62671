"""The package's shape stays one a newcomer can find their way in (tools/import_graph.py):
no import cycle (``TYPE_CHECKING`` and function-level imports included), no module
basename twice, no adapter folder over eight modules, and few ``type: ignore``s in the
adapters."""

from __future__ import annotations

import pytest

from tools.import_graph import report

pytestmark = pytest.mark.unit

SHAPE = report()

#: The folders that adapt Celery and kombu, and the most modules each may hold.
ADAPTER_FOLDER_SIZE = 8


def test_no_import_cycle() -> None:
    assert SHAPE.cycles == []


def test_no_module_basename_twice() -> None:
    assert SHAPE.repeated_basenames == {}


def test_adapter_folders_stay_small() -> None:
    adapters = {
        folder: count
        for folder, count in SHAPE.modules_per_folder.items()
        if folder.startswith(("celery_delayq/brokers", "celery_delayq/worker"))
    }
    assert adapters, "the adapter folders moved: update this test"
    assert {f: n for f, n in adapters.items() if n > ADAPTER_FOLDER_SIZE} == {}


def test_few_type_ignores_in_the_adapters() -> None:
    ignores = sum(n for f, n in SHAPE.type_ignores.items() if f.startswith("celery_delayq/brokers"))
    assert ignores <= 5


def test_few_type_ignores_in_the_package() -> None:
    """At today's count (issue 35 asked for at most 12, from 16): a reply redis-py types
    loosely is read through core/redis_replies.py, not silenced."""
    ignores = {f: n for f, n in SHAPE.type_ignores.items() if f.startswith("celery_delayq/")}
    assert sum(ignores.values()) <= 7, ignores
