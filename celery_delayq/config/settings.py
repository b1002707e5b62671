"""All celery-delayq settings: one registry of names, read from a Celery app.

Every option is an ordinary Celery setting named ``delayq_*`` (or ``CELERY_DELAYQ_*``
with a Django-style namespace), so users switch behaviour in settings, never in code.
``DelayqConfig`` holds the core's (``config_of(app)`` reads and validates them the first
time and keeps the result with the app, as Celery keeps most of its own settings once
read); ``config.dashboard.WebConfig`` the dashboard's (``delayq_web_*``). ``config.catalog``
names them all, each with its type, default and ``doc``, and ``DelayqConfig.from_app``
refuses any other ``delayq_*`` name, so a typo fails loudly.
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
from ..core.urls import sanitize_url
from .broker_url import CLUSTER_SCHEMES, STORE_SCHEMES
from .errors import ConfigurationError
from .fields import SETTING_PREFIX, WEB_PREFIX, setting
from .limits import read_concurrency_limits, read_rate_limits

#: The most ``delayq_max_message_size`` may be: Redis's own largest string (proto-max-bulk-len).
MOST_MESSAGE_SIZE = 512 * 1024 * 1024


@dataclass(frozen=True, repr=False)  # its own __repr__ masks passwords
class DelayqConfig:
    """celery-delayq's settings; the field name plus ``delayq_`` is the Celery setting."""

    key_prefix: str = setting(
        "delayq",
        "Prefix of every key the delayed store writes (after kombu's ``global_keyprefix``).",
        valid="a non-empty string",
    )
    worker_mover: bool = setting(
        True,
        "Run a mover thread in every worker that uses the transport.",
        valid="True or False",
    )
    reliable_consume: bool = setting(
        True,
        (
            "On a Redis broker, restore unacknowledged messages without kombu's "
            "``unacked_mutex`` and count each redelivery in a header; False: kombu's own "
            "restore."
        ),
        valid="True or False",
    )
    max_deliveries: int = setting(
        20,
        (
            "Most deliveries of one message to workers: delivered again after that (a message"
            " that kills its worker comes back after each death), it goes to the dead letters "
            "instead (``celery delayq dead``). Counted on Redis (with "
            "``delayq_reliable_consume``), SQS and RabbitMQ (a classic queue's in the delayed "
            "store); 0: no bound."
        ),
        valid="an integer from 0 to 1000000",
    )
    move_batch_size: int = setting(
        500,
        "Most messages one atomic move call delivers; bounds how long Redis is busy per call.",
        valid="an integer from 1 to 10000",
    )
    max_message_size: int = setting(
        64 * 1024,
        (
            "Largest message (bytes, as stored: kombu's envelope) celery-delayq takes: a "
            "bigger one is refused at publish with ``MessageTooLarge``, nothing stored. "
            "Checked for every message kept in the delayed store (countdown, eta, retries, "
            "keyed and bulk scheduling, periodic occurrences) and, on a Redis broker with "
            "``delayq_reliable_consume``, for every message, as the consume script copies "
            "each one; a script call copying a bigger one holds Redis for every other client "
            "(the default keeps each under a millisecond). 0: no limit."
        ),
        valid=f"an integer from 0 to {MOST_MESSAGE_SIZE}",
    )
    move_call_budget: float = setting(
        0.002,
        (
            "Longest one move call should keep Redis busy (seconds): batches are sized by the "
            "time the calls take, up to ``move_batch_size``; 0: fixed size."
        ),
        valid="a number of seconds from 0 to 1",
    )
    mover_max_sleep: float = setting(
        5.0,
        "Longest a mover sleeps without a wake-up, a safety net for a missed notification.",
        valid="a number of seconds above 0",
    )
    move_ahead: float = setting(
        0.02,
        (
            "On a Redis broker, how long before its ETA a message is moved into its queue: the "
            "worker's own timer then starts it at the ETA, as vanilla Celery's does, instead of"
            " the move, the fetch and the worker's message handling all coming after it."
        ),
        valid="a number of seconds from 0 to 1",
    )
    burst_ahead: float = setting(
        5.0,
        (
            "Most seconds a dense instant (many messages due together) is moved ahead beyond "
            "``move_ahead``, in proportion to its size, so that workers have fetched it by its "
            "ETA as vanilla Celery's would hold it; 0: off."
        ),
        valid="a number of seconds from 0 to 60",
    )
    periodic_horizon: float = setting(
        300.0,
        (
            "How far ahead (seconds) beat writes periodic entries' occurrences into the store:"
            " the longest every beat may be down without an occurrence going unrun, as the "
            "workers' movers deliver what is written."
        ),
        valid="a number of seconds from 1 to 86400",
    )
    mover_retry_max: float = setting(
        10.0,
        "Longest back-off between retries while Redis is unreachable.",
        valid="a number of seconds above 0",
    )
    metrics_port: int | None = setting(
        None,
        (
            "Serve Prometheus metrics on this port from each worker and beat (needs the "
            "``prometheus`` extra); None: off. ``celery delayq exporter`` serves them "
            "standalone."
        ),
        valid="a TCP port number or None",
    )
    metrics_addr: str = setting(
        "127.0.0.1",
        (
            "Address the metrics server listens on: this host only unless told otherwise "
            '("0.0.0.0" for every interface, e.g. for a Prometheus on another machine).'
        ),
    )
    inspect_limit: int = setting(
        1000,
        (
            "Most delayed messages one worker adds to its reply to ``inspect scheduled`` (the "
            "earliest due); 0: add none."
        ),
        valid="an integer from 0 to 100000",
    )
    store_url: str | None = setting(
        None,
        (
            "Where delayed messages wait when they do not wait in the broker's own Redis: a "
            "redis://, rediss://, sentinel:// or (a Redis Cluster) redis+cluster:// URL. Needed"
            " with a broker that is not Redis (RabbitMQ...); with a Redis broker it keeps the "
            "schedule elsewhere. None: the broker's Redis."
        ),
        valid=(
            "a redis://, rediss://, unix://, sentinel:// or (for a Redis Cluster) "
            "redis+cluster:// or rediss+cluster:// URL"
        ),
    )
    store_shards: int = setting(
        1,
        (
            "How many shards each queue's delayed messages are spread over; on a Redis Cluster "
            "each shard is its own hash slot, so one busy queue spans nodes. A task's shard is "
            "fixed by its task id."
        ),
        valid="an integer from 1 to 1024",
    )
    store_wait_replicas: int = setting(
        0,
        (
            "After each schedule, wait until this many replicas have it (Redis's WAIT), so a "
            "failover cannot lose an acknowledged delayed task; 0: do not wait (replication is "
            "asynchronous). Costs a replication round trip per publish."
        ),
        valid="an integer from 0 to 16",
    )
    store_wait_timeout: float = setting(
        1.0,
        "Longest that wait (seconds); a write not confirmed in time is logged, not failed.",
        valid="a number of seconds above 0",
    )
    store_master_name: str | None = setting(
        None,
        (
            "With a ``sentinel://host:port[/db];sentinel://...`` store URL: the name of the "
            "master the sentinels watch (as kombu's ``master_name`` transport option)."
        ),
    )
    handover_lease: float = setting(
        60.0,
        (
            "Seconds a mover may take to publish a claimed message to a broker in another "
            "system before its claim expires and the message is published again."
        ),
        valid="a number of seconds above 0",
    )
    handover_tries: int = setting(
        5,
        (
            "Failed hand-overs (refusals, expired claims) after which a message is moved to the"
            " dead letters (``celery delayq list --dead``)."
        ),
        valid="an integer of at least 1",
    )
    handover_backoff: float = setting(
        1.0,
        "Seconds before a refused message is tried again; doubles with each refusal.",
        valid="a number of seconds above 0",
    )
    rate_limits: Any = setting(
        None,
        (
            "Rate limits that hold across every worker: task name -> a rate as Celery writes"
            ' one ("10/s", "100/m", "5/h", or "/d" for a day), or a list of them, all held at'
            " once. Every message of such a task waits in the delayed store until its limit "
            "allows its release (docs: flow control). None: none."
        ),
        valid='a dict of task name -> a rate such as "10/s", or a list of rates',
    )
    concurrency_limits: Any = setting(
        None,
        (
            "Concurrency limits that hold across every worker: task name -> the most of its "
            "tasks running at once. None: none."
        ),
        valid="a dict of task name -> an integer from 1 to 100000",
    )
    global_rate_limits: bool = setting(
        False,
        (
            "Make every task's own ``rate_limit`` (Celery's per-worker limit) a limit across "
            "all workers, enforced at release as ``delayq_rate_limits`` is; the workers' own "
            "rate limiting is then switched off (``worker_disable_rate_limits``)."
        ),
        valid="True or False",
    )
    concurrency_lease: float = setting(
        60.0,
        (
            "Seconds a running task's concurrency slot is held without its worker renewing it:"
            " the slot of a task whose worker died is free again this long after its last "
            "renewal."
        ),
        valid="a number of seconds from 1 to 86400",
    )
    release_log: int = setting(
        10_000,
        (
            "How many of the last flow-control releases each queue keeps in its release log "
            "(for ``celery delayq limits`` and audits); 0: no log."
        ),
        valid="an integer from 0 to 1000000",
    )
    #: Not a ``delayq_`` setting: Celery's own ``timezone``, used for naive ETAs as the
    #: worker would read them.
    timezone: tzinfo | None = dataclasses.field(default=None, compare=False, metadata={})

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
            ("max_deliveries", 0, 1_000_000),
            ("store_shards", 1, 1024),
            ("store_wait_replicas", 0, 16),
            ("max_message_size", 0, MOST_MESSAGE_SIZE),
            ("release_log", 0, 1_000_000),
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
        _check(
            isinstance(self.global_rate_limits, bool),
            f"delayq_global_rate_limits must be True or False, got {self.global_rate_limits!r}",
        )
        _check(
            isinstance(self.concurrency_lease, (int, float))
            and not isinstance(self.concurrency_lease, bool)
            and 1 <= self.concurrency_lease <= 86400,
            "delayq_concurrency_lease must be a number of seconds from 1 to 86400, "
            f"got {self.concurrency_lease!r}",
        )
        # frozen, and hashable (configs are compared and kept in sets): the limits are
        # kept as sorted tuples of task name -> parsed limits
        fields = type(self).__dataclass_fields__
        rates = read_rate_limits(self.rate_limits, fields["rate_limits"].metadata["valid"])
        concurrency = read_concurrency_limits(
            self.concurrency_limits, fields["concurrency_limits"].metadata["valid"]
        )
        object.__setattr__(self, "rate_limits", rates)
        object.__setattr__(self, "concurrency_limits", concurrency)
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
        _check(
            isinstance(self.periodic_horizon, (int, float))
            and not isinstance(self.periodic_horizon, bool)
            and 1 <= self.periodic_horizon <= 86400,
            "delayq_periodic_horizon must be a number of seconds from 1 to 86400, "
            f"got {self.periodic_horizon!r}",
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
    def from_app(cls, app: Celery) -> DelayqConfig:
        """Read and validate the ``delayq_*`` settings of ``app``.

        Unknown ``delayq_*`` names are refused: a typo would otherwise silently
        leave a default in force.
        """
        conf = app.conf
        # app.namespace, not conf.prefix: the latter is None until the settings are read.
        namespace = (app.namespace or "").rstrip("_").lower()
        namespace = namespace + "_" if namespace else ""
        for key in list(conf):
            name = key.lower()
            if namespace and name.startswith(namespace):
                name = name[len(namespace) :]
            if name.startswith(SETTING_PREFIX) and not is_setting(name):
                known = ", ".join(sorted(setting_names()))
                raise ConfigurationError(f"unknown celery-delayq setting {key!r}; known: {known}")
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            if "doc" not in field.metadata:
                continue
            value = conf.get(SETTING_PREFIX + field.name)
            if value is not None:
                values[field.name] = value
        return cls(timezone=app.timezone, **values)


def setting_names() -> list[str]:
    """Every celery-delayq setting's name (the error for a typo lists them)."""
    from .dashboard import WebConfig

    core = [
        SETTING_PREFIX + f.name for f in dataclasses.fields(DelayqConfig) if "doc" in f.metadata
    ]
    return core + [WEB_PREFIX + f.name for f in dataclasses.fields(WebConfig)]


def is_setting(name: str) -> bool:
    """Whether ``name`` (lower case, no namespace) is a celery-delayq setting. The web
    module is imported only for a ``delayq_web_*`` name, so a publishing process never
    builds the dashboard's settings."""
    if name.startswith(WEB_PREFIX):
        from .dashboard import WebConfig

        return name[len(WEB_PREFIX) :] in WebConfig.__dataclass_fields__
    field = DelayqConfig.__dataclass_fields__.get(name[len(SETTING_PREFIX) :])
    return field is not None and "doc" in field.metadata


_configs: weakref.WeakKeyDictionary[Celery, DelayqConfig] = weakref.WeakKeyDictionary()


def config_of(app: Celery) -> DelayqConfig:
    """The app's validated settings, read once per app."""
    config = _configs.get(app)
    if config is None:
        config = _configs[app] = DelayqConfig.from_app(app)
    return config


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigurationError(message)
