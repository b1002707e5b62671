"""What the Redis and SQS channels (kombu virtual transports) share: the diverter each
holds, the store it opens, broadcasts that cancel revoked ids, kombu's own put for a due
message, and a queue's delete taking its delayed messages with it.

Placed before kombu's channel class in the bases, so its methods wrap kombu's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from celery import Celery

from ...config.errors import ConfigurationError
from ...config.settings import DelayqConfig
from ...core.store import DelayedStore
from .diverter import STORE_URL_NEEDED, Diverter

if TYPE_CHECKING:
    from kombu.transport import virtual

    from ...core.handover.publishing import Publisher

    class KombuChannel(virtual.Channel):
        """kombu's virtual channel as the broker's own subclass has it."""

        def _put_fanout(
            self, exchange: str, message: dict[str, Any], *a: Any, **k: Any
        ) -> None: ...
else:
    KombuChannel = object  # the broker's own kombu channel follows in the bases


class VirtualDelayqChannel(KombuChannel):
    """The delayed store on a kombu virtual channel; a broker's channel names its URL
    schemes, whether the broker holds the store, and how a mover publishes to it."""

    keeps_own_store: ClassVar[bool] = False
    #: Broker URL schemes this channel serves (None: kombu's check only).
    url_schemes: ClassVar[frozenset[str] | None] = None
    diverter: Diverter

    def set_up_diverter(self, connection: Any) -> None:
        """Give the channel of ``connection`` (kombu's transport) its diverter, with the
        settings of the app it serves; called before kombu's own ``__init__``."""
        self.diverter = Diverter.of_current_app(
            self.store_for, self.url_schemes, broker=getattr(connection, "client", None)
        )

    @classmethod
    def publisher_factory(cls, app: Celery) -> Callable[[], Publisher]:
        raise NotImplementedError

    def store_for(self, config: DelayqConfig) -> DelayedStore:
        """The delayed store with the given settings: at ``delayq_store_url`` when set
        (handing messages over with confirms), else in the broker itself."""
        if config.store_url is not None:
            # Imported only here: a store on the broker needs none of the hand-over's code.
            from .separate_store import separate_store

            return separate_store(config, self.publisher_factory(self.diverter.app))
        return self.store_on_broker(config)

    def store_on_broker(self, config: DelayqConfig) -> DelayedStore:
        """The store in the broker itself: only a Redis broker has one."""
        raise ConfigurationError(STORE_URL_NEEDED)

    def _put_fanout(self, exchange: str, message: dict[str, Any], *args: Any, **kw: Any) -> None:
        """Broadcast; a ``revoke`` also cancels its ids in the store first."""
        self.diverter.cancel_if_revoke_in(exchange, message)
        super()._put_fanout(exchange, message, *args, **kw)

    def put_now(self, queue: str, message: dict[str, Any]) -> None:
        """kombu's own put, for a due message (never diverted to the store again)."""
        super()._put(queue, message)

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        """Delete the queue (kombu's own), then its delayed messages: they would
        otherwise be delivered to a queue that no longer exists."""
        super()._delete(queue, *args, **kwargs)
        self.diverter.store.purge(queue)
