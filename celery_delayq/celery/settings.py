"""All celery-delayq settings, read once from a Celery app into one frozen object.

Every option is an ordinary Celery setting named ``delayq_*`` (or ``CELERY_DELAYQ_*``
with a Django-style namespace), so users switch behaviour in settings, never in code.
``config_of(app)`` reads and validates them the first time and keeps the result with the
app, as Celery keeps most of its own settings once read.
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from datetime import tzinfo
from typing import Any
from urllib.parse import urlparse

from celery import Celery

from ..core.store import ReplicaWait
from ..core.urls import sanitize_url, url_parts
from .errors import ConfigurationError

SETTING_PREFIX = "delayq_"
#: The web dashboard's settings (celery_delayq/web reads them): known names here too.
WEB_SETTINGS = frozenset(
    {
        "delayq_web_username",
        "delayq_web_password",
        "delayq_web_token",
        "delayq_web_secret_key",
        "delayq_web_secure_cookies",
        "delayq_web_allowed_hosts",
    }
)

#: URL schemes a Redis broker may be given with (``socket`` and ``unix`` are Unix sockets).
REDIS_SCHEMES = frozenset({"redis", "rediss", "socket", "unix", "redis+socket"})
SENTINEL_SCHEMES = frozenset({"sentinel"})
#: ``delayq_store_url`` schemes that name a Redis Cluster (any of its nodes; several
#: comma-separated in the host part).
CLUSTER_SCHEMES = frozenset({"redis+cluster", "rediss+cluster"})
#: URL schemes ``delayq_store_url`` may have (redis-py's ``Redis.from_url``, Sentinel
#: as kombu writes it, and a cluster).
STORE_SCHEMES = frozenset({"redis", "rediss", "unix", "sentinel", *CLUSTER_SCHEMES})


@dataclass(frozen=True)
class DelayqConfig:
    """celery-delayq's settings; the field name plus ``delayq_`` is the Celery setting."""

    #: Prefix of every key the delayed store writes (after kombu's ``global_keyprefix``).
    key_prefix: str = "delayq"
    #: Run a mover thread in every worker that uses the transport.
    worker_mover: bool = True
    #: On a Redis broker, restore unacknowledged messages without kombu's
    #: ``unacked_mutex`` (redis_restore.py) and count each redelivery in a header; False:
    #: kombu's own restore.
    reliable_consume: bool = True
    #: Most messages one atomic move call delivers; bounds how long Redis is busy per call.
    move_batch_size: int = 500
    #: Longest one move call should keep Redis busy (seconds): batches are sized by the
    #: time the calls take, up to ``move_batch_size`` (core/batching.py); 0: fixed size.
    move_call_budget: float = 0.002
    #: Longest a mover sleeps without a wake-up, a safety net for a missed notification.
    mover_max_sleep: float = 5.0
    #: On a Redis broker, how long before its ETA a message is moved into its queue: the
    #: worker's own timer then starts it at the ETA, as vanilla Celery's does, instead of
    #: the move, the fetch and the worker's message handling all coming after it.
    move_ahead: float = 0.02
    #: Most seconds a dense instant (many messages due together) is moved ahead beyond
    #: ``move_ahead``, in proportion to its size, so that workers have fetched it by its
    #: ETA as vanilla Celery's would hold it (core/lua/move_due.lua); 0: off.
    burst_ahead: float = 5.0
    #: Longest back-off between retries while Redis is unreachable.
    mover_retry_max: float = 10.0
    #: Serve Prometheus metrics on this port from each worker and beat (needs the
    #: ``prometheus`` extra); None: off. ``celery delayq exporter`` serves them standalone.
    metrics_port: int | None = None
    #: Address the metrics server listens on: this host only unless told otherwise
    #: ("0.0.0.0" for every interface, e.g. for a Prometheus on another machine).
    metrics_addr: str = "127.0.0.1"
    #: Most delayed messages one worker adds to its reply to ``inspect scheduled`` (the
    #: earliest due); 0: add none.
    inspect_limit: int = 1000
    #: Where delayed messages wait when they do not wait in the broker's own Redis: a
    #: redis://, rediss://, sentinel:// or (a Redis Cluster) redis+cluster:// URL. Needed
    #: with a broker that is not Redis (RabbitMQ...); with a Redis broker it keeps the
    #: schedule elsewhere. None: the broker's Redis.
    store_url: str | None = None
    #: How many shards each queue's delayed messages are spread over; on a Redis Cluster
    #: each shard is its own hash slot, so one busy queue spans nodes. A task's shard is
    #: fixed by its task id.
    store_shards: int = 1
    #: After each schedule, wait until this many replicas have it (Redis's WAIT), so a
    #: failover cannot lose an acknowledged delayed task; 0: do not wait (replication is
    #: asynchronous). Costs a replication round trip per publish.
    store_wait_replicas: int = 0
    #: Longest that wait (seconds); a write not confirmed in time is logged, not failed.
    store_wait_timeout: float = 1.0
    #: With a ``sentinel://host:port[/db];sentinel://...`` store URL: the name of the
    #: master the sentinels watch (as kombu's ``master_name`` transport option).
    store_master_name: str | None = None
    #: Seconds a mover may take to publish a claimed message to a broker in another
    #: system before its claim expires and the message is published again.
    handover_lease: float = 60.0
    #: Failed hand-overs (refusals, expired claims) after which a message is moved to
    #: the dead letters (``celery delayq list --dead``).
    handover_tries: int = 5
    #: Seconds before a refused message is tried again; doubles with each refusal.
    handover_backoff: float = 1.0
    #: Not a ``delayq_`` setting: Celery's own ``timezone``, used for naive ETAs as the
    #: worker would read them.
    timezone: tzinfo | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        _check(
            self.metrics_port is None
            or (isinstance(self.metrics_port, int) and 0 < self.metrics_port < 65536),
            f"delayq_metrics_port must be a TCP port number or None, got {self.metrics_port!r}",
        )
        _check(
            isinstance(self.key_prefix, str) and bool(self.key_prefix.strip()),
            f"delayq_key_prefix must be a non-empty string, got {self.key_prefix!r}",
        )
        _check(
            isinstance(self.worker_mover, bool),
            f"delayq_worker_mover must be True or False, got {self.worker_mover!r}",
        )
        _check(
            isinstance(self.reliable_consume, bool),
            f"delayq_reliable_consume must be True or False, got {self.reliable_consume!r}",
        )
        for name, low, high in (
            ("move_batch_size", 1, 10_000),
            ("inspect_limit", 0, 100_000),
            ("store_shards", 1, 1024),
            ("store_wait_replicas", 0, 16),
        ):
            value = getattr(self, name)
            _check(
                isinstance(value, int) and not isinstance(value, bool) and low <= value <= high,
                f"delayq_{name} must be an integer from {low} to {high}, got {value!r}",
            )
        _check(
            self.store_url is None or urlparse(str(self.store_url)).scheme.lower() in STORE_SCHEMES,
            "delayq_store_url must be a redis://, rediss://, unix://, sentinel:// or (for a "
            "Redis Cluster) redis+cluster:// or rediss+cluster:// URL, "
            f"got {sanitize_url(str(self.store_url))!r}",
        )
        _check(
            not self.store_is_cluster or urlparse(str(self.store_url)).path.strip("/") in ("", "0"),
            "a Redis Cluster has database 0 only: delayq_store_url "
            f"{sanitize_url(str(self.store_url))!r} names another",
        )
        _check(
            not str(self.store_url or "").lower().startswith("sentinel")
            or bool(self.store_master_name),
            "a sentinel:// delayq_store_url needs delayq_store_master_name (the master the "
            "sentinels watch)",
        )
        _check(
            isinstance(self.handover_tries, int)
            and not isinstance(self.handover_tries, bool)
            and self.handover_tries >= 1,
            f"delayq_handover_tries must be an integer of at least 1, got {self.handover_tries!r}",
        )
        for name in (
            "mover_max_sleep",
            "mover_retry_max",
            "handover_lease",
            "handover_backoff",
            "store_wait_timeout",
        ):
            value = getattr(self, name)
            _check(
                isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0,
                f"delayq_{name} must be a number of seconds above 0, got {value!r}",
            )
        _check(
            isinstance(self.move_ahead, (int, float))
            and not isinstance(self.move_ahead, bool)
            and 0 <= self.move_ahead <= 1,
            f"delayq_move_ahead must be a number of seconds from 0 to 1, got {self.move_ahead!r}",
        )
        for name, most in (("move_call_budget", 1), ("burst_ahead", 60)):
            value = getattr(self, name)
            _check(
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and 0 <= value <= most,
                f"delayq_{name} must be a number of seconds from 0 to {most}, got {value!r}",
            )

    def __repr__(self) -> str:
        """The settings as ``dataclass`` shows them, with the store URL's passwords masked
        (a config in a log line or a traceback must not carry them)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.store_url is not None:
            values["store_url"] = sanitize_url(self.store_url)
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in values.items())})"

    @property
    def replica_wait(self) -> ReplicaWait | None:
        """How schedules wait for replicas, or None."""
        if not self.store_wait_replicas:
            return None
        return ReplicaWait(self.store_wait_replicas, round(self.store_wait_timeout * 1000))

    @property
    def store_is_cluster(self) -> bool:
        """Whether ``store_url`` names a Redis Cluster (redis+cluster://...)."""
        return urlparse(str(self.store_url or "")).scheme.lower() in CLUSTER_SCHEMES

    @property
    def mover_alive_within(self) -> float:
        """How recent a heartbeat must be for its mover to count as alive: a mover beats
        after every wake-up, at least every ``mover_max_sleep`` seconds."""
        return 2 * self.mover_max_sleep + 5

    @classmethod
    def setting_names(cls) -> list[str]:
        """The Celery setting names this object reads."""
        return [SETTING_PREFIX + f.name for f in dataclasses.fields(cls) if f.name != "timezone"]

    @classmethod
    def from_app(cls, app: Celery) -> DelayqConfig:
        """Read and validate the ``delayq_*`` settings of ``app``.

        Unknown ``delayq_*`` names are refused: a typo would otherwise silently
        leave a default in force.
        """
        conf = app.conf
        known = set(cls.setting_names()) | WEB_SETTINGS
        namespace = (getattr(conf, "prefix", None) or "").lower()
        for key in list(conf):
            name = key.lower()
            if namespace and name.startswith(namespace):
                name = name[len(namespace) :]
            if name.startswith(SETTING_PREFIX) and name not in known:
                raise ConfigurationError(
                    f"unknown celery-delayq setting {key!r}; known: {', '.join(sorted(known))}"
                )
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            if field.name == "timezone":
                continue
            value = conf.get(SETTING_PREFIX + field.name)
            if value is not None:
                values[field.name] = value
        return cls(timezone=app.timezone, **values)


_configs: weakref.WeakKeyDictionary[Celery, DelayqConfig] = weakref.WeakKeyDictionary()


def config_of(app: Celery) -> DelayqConfig:
    """The app's validated settings, read once per app."""
    config = _configs.get(app)
    if config is None:
        config = _configs[app] = DelayqConfig.from_app(app)
    return config


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


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigurationError(message)
