"""The URL schemes celery-delayq serves, and the check of an app's broker URL against them."""

from __future__ import annotations

from urllib.parse import urlparse

from celery import Celery

from ..core.urls import sanitize_url, url_parts
from .errors import ConfigurationError

#: URL schemes a Redis broker may be given with (``socket`` and ``unix`` are Unix sockets).
REDIS_SCHEMES = frozenset({"redis", "rediss", "socket", "unix", "redis+socket"})
SENTINEL_SCHEMES = frozenset({"sentinel"})
#: ``delayq_store_url`` schemes that name a Redis Cluster (any of its nodes; several
#: comma-separated in the host part).
CLUSTER_SCHEMES = frozenset({"redis+cluster", "rediss+cluster"})
#: URL schemes ``delayq_store_url`` may have (redis-py's ``Redis.from_url``, Sentinel
#: as kombu writes it, and a cluster).
STORE_SCHEMES = frozenset({"redis", "rediss", "unix", "sentinel", *CLUSTER_SCHEMES})


def check_broker_url(app: Celery, schemes: frozenset[str] = REDIS_SCHEMES) -> None:
    """Refuse a broker URL the Redis transport cannot use, with a clear message.

    When ``broker_transport`` names a class, kombu drops the URL's scheme and would
    try an ``amqp://`` host as if it were Redis; failing early here is kinder.
    """
    url = app.conf.broker_write_url or app.conf.broker_url
    if not url:
        return  # kombu's default: redis on localhost
    for one_url in url_parts(url):
        scheme = urlparse(one_url.strip()).scheme.lower()
        if scheme and scheme not in schemes:
            raise ConfigurationError(
                f"celery-delayq needs a {' or '.join(sorted(schemes))} broker URL, "
                f"got {sanitize_url(one_url)!r}"
            )
        if scheme == "rediss" and not app.conf.broker_use_ssl:
            raise ConfigurationError(
                "a rediss:// broker URL needs the broker_use_ssl setting "
                "(e.g. {'ssl_cert_reqs': ssl.CERT_REQUIRED, 'ssl_ca_certs': ...}) "
                "when broker_transport names a class"
            )
