"""Changing pending messages: cancel a task, or give it a new due time."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Optional, cast

from ..keys import QueueKeys
from ..lua_scripts import run_pipelined
from ..record import Record, task_key
from .state import StoreState

#: Most extra messages of a task (sharing its task id) one cancel call removes: about a
#: millisecond of Redis time, like a move call's batch.
CANCEL_CHUNK = 100


class Changes:
    """Cancels and reschedules the pending messages of a task, in every queue."""

    def __init__(self, state: StoreState) -> None:
        self.state = state

    def cancel(self, task_id: str) -> int:
        """Remove every pending message of ``task_id``; how many were removed.

        One script call per shard removes at most ``CANCEL_CHUNK`` extra messages of the
        task (lua/cancel.lua), so thousands sharing a task id take several short calls,
        pipelined per round, until no shard has any left.
        """
        key = task_key(task_id)
        shards = self.state.all_shards(self.state.queues())
        removed = 0
        while shards:
            calls = [
                (self.state.scripts.cancel, keys.as_list(), [*keys.page_args(), key, CANCEL_CHUNK])
                for keys in shards
            ]
            replies = run_pipelined(self.state.client, calls)
            removed += sum(int(reply[0]) for reply in replies)
            shards = [keys for keys, reply in zip(shards, replies) if int(reply[1])]
        return removed

    def reschedule(
        self, task_id: str, due_ms: int, rewrite_payload: Callable[[bytes], bytes]
    ) -> int:
        """Give every pending message of ``task_id`` a new due time; how many changed.

        ``rewrite_payload`` updates the message itself (its ``eta`` header), so a
        worker receiving it early does not hold it until the old ETA.
        """
        changed = 0
        for keys in self.state.all_shards(self.state.queues()):
            for key in self.state.message_keys(keys, task_id):
                changed += self._replace(keys, key, due_ms, rewrite_payload)
        return changed

    def _replace(
        self,
        keys: QueueKeys,
        key: bytes,
        due_ms: int,
        rewrite_payload: Callable[[bytes], bytes],
    ) -> int:
        raw = cast(Optional[bytes], self.state.client.hget(keys.messages, key))
        if raw is None:
            return 0
        record = Record.decode(raw, keys.own_list)
        new = dataclasses.replace(record, due_ms=due_ms, payload=rewrite_payload(record.payload))
        new_raw = new.encode(keys.own_list)
        wakeup = self.state.keys.wakeup_channel
        return int(
            self.state.run(self.state.scripts.replace, keys, key, raw, new_raw, due_ms, wakeup)
        )
