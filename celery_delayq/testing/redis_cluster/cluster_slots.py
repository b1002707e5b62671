"""A cluster's hash slots and ports: what every node computes alike, and the free port
pairs (port, cluster bus port) a throw-away node listens on."""

from __future__ import annotations

import socket
from typing import NamedTuple

from redis.crc import key_slot

from ..processes import free_port

SLOTS = 16384
HOST = "127.0.0.1"
#: A node's cluster bus listens on its port + 10000 (the only choice on Redis 6.2).
BUS_PORT_OFFSET = 10000
#: Slots per CLUSTER ADDSLOTS call: one call per slot would be 16384 round trips.
ADDSLOTS_CHUNK = 1000
#: Node flags of CLUSTER NODES that say a node is not (yet) a healthy member.
UNHEALTHY_FLAGS = {"fail", "fail?", "handshake", "noaddr"}


class SlotRange(NamedTuple):
    """One line of CLUSTER SLOTS, by port: slots ``first``..``last`` are served by the
    master on port ``master``, copied to the replicas on ports ``replicas``."""

    first: int
    last: int
    master: int
    replicas: tuple[int, ...]


def free_cluster_port(taken: set[int]) -> int:
    """A free port whose cluster bus port (+10000) is free too and not in ``taken``;
    both are added to ``taken``. Redis refuses a cluster node on a port above 55535."""
    for _ in range(200):
        port = free_port()
        bus = port + BUS_PORT_OFFSET
        if bus <= 65535 and not taken & {port, bus} and _bindable(bus):
            taken.update((port, bus))
            return port
    raise RuntimeError("found no free pair of ports (port, port + 10000) for a cluster node")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def slot_of(key: bytes | str) -> int:
    """The hash slot of ``key`` (hash tags included), as every cluster node computes it."""
    return int(key_slot(key.encode() if isinstance(key, str) else key))
