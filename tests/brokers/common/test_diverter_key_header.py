"""The diverter spots a keyed message by the delay-key header's name without importing
key_headers (a plain publish never loads it): the two names must stay one."""

import pytest

from celery_delayq.brokers.common import diverter, key_headers

pytestmark = pytest.mark.unit


def test_the_diverter_looks_for_the_header_key_headers_reads() -> None:
    assert diverter.KEY_HEADER == key_headers.KEY_HEADER
