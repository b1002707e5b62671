"""A batch's confirms settle each of its messages once, whatever mix of single and
multiple acks and nacks the broker sends."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from celery_delayq.brokers.amqp.publisher import BatchConfirms
from celery_delayq.core.handover.publishing import Outgoing, PublishReport

pytestmark = pytest.mark.unit


class ListenedChannel:
    """What a batch needs of its channel: py-amqp's event handler sets."""

    def __init__(self) -> None:
        self.events: defaultdict[str, set[Any]] = defaultdict(set)


def batch_of(count: int, first: int) -> tuple[BatchConfirms, PublishReport]:
    report = PublishReport()
    messages = [Outgoing(f"m{i}".encode(), "d", b"{}", 0) for i in range(count)]
    batch = BatchConfirms(report, None, ListenedChannel(), first, messages)
    return batch, report


def test_single_and_multiple_answers_settle_each_message_once() -> None:
    batch, report = batch_of(6, first=11)  # tags 11..16
    batch.on_ack(12, multiple=False)
    batch.on_nack(13, multiple=False)
    batch.on_ack(14, multiple=True)  # 11 and 14; 12 and 13 are settled already
    assert batch.unconfirmed == 2
    batch.on_ack(14, multiple=True)  # again: nothing new
    batch.on_nack(16, multiple=True)
    assert batch.unconfirmed == 0
    assert report.confirmed == [b"m1", b"m0", b"m3"]
    assert sorted(report.refused) == [b"m2", b"m4", b"m5"]


def test_answers_about_tags_outside_the_batch_settle_nothing() -> None:
    batch, report = batch_of(2, first=5)
    batch.on_ack(4, multiple=True)
    batch.on_ack(7, multiple=False)
    assert batch.unconfirmed == 2 and report.confirmed == []
    batch.on_ack(9, multiple=True)  # beyond the batch: up to its last message
    assert batch.unconfirmed == 0 and report.confirmed == [b"m0", b"m1"]
