"""Changing pending messages: cancel a task, or give it a new due time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional, cast

from ..layout.keys import QueueKeys
from ..layout.record import Record, task_key
from ..lua import ScriptCall, run_pipelined
from .state import StoreState

#: Most extra messages of a task (sharing its task id) one cancel call removes: about a
#: millisecond of Redis time (2.4 ms at 100 on a 2-core VM), like a move call's batch.
CANCEL_CHUNK = 50


class Changes:
    """Cancels and reschedules the pending messages of a task, in every queue (in the
    shards that may hold them: ``StoreState.task_shards``)."""

    def __init__(self, state: StoreState) -> None:
        self.state = state

    def cancel(self, task_id: str) -> int:
        """Remove every pending message of ``task_id``; how many were removed.

        One script call per shard looks at most at ``CANCEL_CHUNK`` extra messages of the
        task (lua/cancel.lua), so thousands sharing a task id take several short calls,
        a round of them at a time, each going on from where the one before stopped, until
        no shard has any left. A message a mover holds, handing it to another broker, is
        left to that mover (it is delivered, or comes back to the schedule).
        """
        key = task_key(task_id)
        cursors: dict[QueueKeys, bytes] = dict.fromkeys(self.state.task_shards(task_id), b"")
        removed = 0
        while cursors:
            calls = [
                (
                    self.state.scripts.cancel,
                    [*keys.as_list(), keys.inflight],
                    [*keys.page_args(), key, CANCEL_CHUNK, cursor],
                )
                for keys, cursor in cursors.items()
            ]
            replies = self._run(calls)
            removed += sum(int(reply[0]) for reply in replies)
            cursors = {keys: reply[1] for keys, reply in zip(cursors, replies) if reply[1]}
        return removed

    def _run(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run a round of calls: pipelined on a single Redis; on a cluster one by one,
        each on the node its keys name (redis-py's cluster pipeline asks its default node
        for the keys of every EVALSHA, so a cancel would fail while that node is down,
        whichever master holds the task)."""
        if not self.state.cluster:
            return run_pipelined(self.state.client, calls)
        return [self.state.call(script, keys, args) for script, keys, args in calls]

    def reschedule(
        self, task_id: str, due_ms: int, rewrite_payload: Callable[[bytes], bytes]
    ) -> int:
        """Give every pending message of ``task_id`` a new due time; how many changed.

        ``rewrite_payload`` updates the message itself (its ``eta`` header), so a
        worker receiving it early does not hold it until the old ETA.
        """
        changed = 0
        for keys in self.state.task_shards(task_id):
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
        new = record._replace(due_ms=due_ms, payload=rewrite_payload(record.payload))
        new_raw = new.encode(keys.own_list)
        wakeup = self.state.keys.wakeup_channel
        args = [*keys.page_args(), key, raw, new_raw, due_ms, wakeup]
        return int(
            self.state.call(self.state.scripts.replace, [*keys.as_list(), keys.inflight], args)
        )
