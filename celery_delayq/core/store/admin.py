"""Administration of the store: purge a queue, repair a message whose page entry or
record went astray, and read every page entry for the consistency checks."""

from __future__ import annotations

from collections.abc import Sequence

from ..layout.keys import QueueKeys
from ..redis_replies import list_reply
from .state import StoreState

#: Most entries one read of a page returns (page_entries).
PAGE_READ = 10_000


class Admin:
    """Purges and repairs queues (health/consistency.py finds what to repair)."""

    def __init__(self, state: StoreState) -> None:
        self.state = state

    def purge(self, queue: str, lists: Sequence[str] = ()) -> int:
        """Delete every pending message of ``queue`` but the periodic occurrences written
        ahead, and with ``lists`` (real keys of the same Redis) the messages in those
        lists too, in the same atomic call as an unsharded queue's messages (one call per
        shard: each shard is atomic on its own); how many were deleted. The occurrences
        stay because their entries' marks say they are written: no beat would write them
        again, and the entries would run nothing until their horizon passed (pause or
        remove an entry to stop it). A sharded or clustered queue stays registered, since
        a producer may be scheduling into a shard purged a moment ago."""
        shards = self.state.keys.shards_of(queue)
        forget = self.state.registry_in_scripts() if len(shards) == 1 else []
        return sum(
            int(
                self.state.scripts.purge(
                    keys=[
                        *keys.as_list(),
                        keys.periodic_ahead,
                        *forget,
                        *(lists if keys.shard == 0 else ()),
                    ],
                    args=[*keys.page_args(), queue, len(forget)],
                )
            )
            for keys in shards
        )

    def repair(self, keys: QueueKeys, key: bytes, seen_page: bytes | None) -> bool:
        """Schedule a message at its record's due time, dropping its entry from
        ``seen_page`` (if any); False when it has no readable record (nothing left: an
        unreadable record goes to the dead letters)."""
        args = [*keys.page_args(), key, seen_page or ""]
        return bool(self.state.scripts.repair(keys=keys.move_keys(), args=args))

    def page_entries(self, keys: QueueKeys) -> dict[bytes, tuple[bytes, int]]:
        """Every page entry of a queue shard, message key -> (page number, due ms); for
        consistency checks."""
        entries: dict[bytes, tuple[bytes, int]] = {}
        pages = list_reply(self.state.client.zrange(keys.pages, 0, -1))
        with self.state.client.pipeline(
            transaction=False
        ) as pipe:  # one round trip, not one a page
            for page in pages:
                pipe.zrange(keys.page(page), 0, PAGE_READ - 1, withscores=True)
            for page, page_entries in zip(pages, pipe.execute()):
                read = 0
                while True:  # a page of one instant may be huge: the rest in bounded reads
                    entries.update((key, (page, int(due))) for key, due in page_entries)
                    read += PAGE_READ
                    if len(page_entries) < PAGE_READ:
                        break
                    page_entries = self.state.client.zrange(
                        keys.page(page), read, read + PAGE_READ - 1, withscores=True
                    )
        return entries
