"""An ``eta`` header is read as Celery's worker reads it: the quick path for the form
Celery writes agrees with Celery's own helpers on every such time, and any other form
is left to them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from celery.utils.time import maybe_iso8601, maybe_make_aware
from hypothesis import given
from hypothesis import strategies as st

from celery_delayq.brokers.common.message import eta_timestamp
from celery_delayq.config.errors import InvalidETA

pytestmark = pytest.mark.unit

OFFSETS = st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
AWARE = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30), timezones=OFFSETS
)


def celerys(eta: str, tz=timezone.utc) -> float:
    return maybe_make_aware(maybe_iso8601(eta), tz).timestamp()


@given(AWARE)
def test_every_time_in_celerys_form_reads_as_celery_reads_it(moment: datetime) -> None:
    eta = moment.isoformat()
    assert eta_timestamp(eta, timezone.utc) == celerys(eta)


@pytest.mark.parametrize(
    "eta",
    [
        "2026-11-29T01:02:03Z",  # not isoformat()'s: Celery's helpers read it
        "2026-11-29 01:02:03.5+00:00",
        "2026-11-29T01:02:03.500+01:00",  # three fraction digits
        "2026-11-29T01:02:03",  # naive: the app's time zone applies
    ],
)
def test_another_form_is_read_by_celerys_helpers(eta: str) -> None:
    zone = timezone(timedelta(hours=2))
    assert eta_timestamp(eta, zone) == celerys(eta, zone)


@pytest.mark.parametrize(
    "eta", ["2026-11-29T01:02:03+05:30:15", "2026-11-29T25:02:03+00:00", "soon+00:00"]
)
def test_what_celerys_worker_cannot_read_is_refused(eta: str) -> None:
    with pytest.raises(InvalidETA):
        eta_timestamp(eta, timezone.utc)
