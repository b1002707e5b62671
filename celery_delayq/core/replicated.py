"""Writes that wait for replicas (``delayq_store_wait_replicas``).

Redis replicates asynchronously: a schedule the master acknowledged is lost if the master
dies before a replica got it, and the replica takes over without it. ``WAIT n timeout``
after the write, on the same connection, returns once ``n`` replicas have everything that
connection wrote (or the timeout passed). It must follow the write on its connection, so
on a Redis Cluster the calls go to each node's own client, grouped by node, one WAIT per
group; a call that a node refuses with MOVED or ASK (a failover or reshard moved its
slot) did nothing there, and runs again once the layout has been read afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import AskError, NoScriptError, TryAgainError

from .lua import ScriptCall
from .topology import redis_location, reread_layout

logger = logging.getLogger(__name__)


def run_replicated(
    client: redis.Redis, calls: Sequence[ScriptCall], replicas: int, timeout_ms: int
) -> list[Any]:
    """Run script calls as ``run_pipelined`` does, then wait until ``replicas`` replicas
    have them (at most ``timeout_ms`` per node); their replies in order. Fewer replicas
    in time is logged, not raised: the write itself succeeded, and a publish retried
    on an error would schedule the task twice."""
    replies: list[Any] = [None] * len(calls)
    pending = list(range(len(calls)))
    for _ in range(3):  # a layout that keeps changing fails below, as a command would
        moved = []
        for server, indices in _by_node(client, calls, pending).items():
            done = _run_on(server, [calls[i] for i in indices], replicas, timeout_ms)
            for i, reply in zip(indices, done):
                if isinstance(reply, (AskError, TryAgainError)):  # MovedError is an AskError
                    moved.append(i)
                else:
                    replies[i] = reply
        if not moved:
            break
        reread_layout(client)
        pending = moved
    else:
        raise redis.exceptions.ClusterError(f"{len(moved)} calls kept moving between nodes")
    error = next((reply for reply in replies if isinstance(reply, Exception)), None)
    if error is not None:
        raise error
    return replies


def _by_node(
    client: redis.Redis, calls: Sequence[ScriptCall], indices: list[int]
) -> dict[redis.Redis, list[int]]:
    """The calls' indices grouped by the client of the node that holds their keys."""
    if not isinstance(client, RedisCluster):
        return {client: indices}
    groups: dict[redis.Redis, list[int]] = {}
    for i in indices:
        node = client.get_node_from_key(calls[i][1][0])
        groups.setdefault(client.get_redis_connection(node), []).append(i)
    return groups


def _run_on(
    server: redis.Redis, calls: list[ScriptCall], replicas: int, timeout_ms: int
) -> list[Any]:
    """The calls, then WAIT, in one pipeline on one server's connection."""
    with server.pipeline(transaction=False) as pipe:
        for script, keys, args in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        *replies, acked = pipe.execute(raise_on_error=False)
    retry = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if retry:  # a node that has not seen the script (a new master): load it, run again
        for script, _, _ in calls:
            server.script_load(script.script)
        for i, reply in zip(
            retry, _run_on(server, [calls[i] for i in retry], replicas, timeout_ms)
        ):
            replies[i] = reply
        return replies
    if isinstance(acked, int) and acked < replicas:
        logger.warning(
            "celery-delayq: %d of %d replicas of %s confirmed a write within %d ms: it is "
            "on the master, and lost if the master fails before a replica gets it",
            acked,
            replicas,
            redis_location(server),
            timeout_ms,
        )
    return replies
