"""``RedisClusterServers``: the nodes of a throw-away Redis Cluster, started, joined and
watched until they agree, and the faults a test puts them through."""

from __future__ import annotations

import shutil
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster

from ..redis_server import RedisServer
from ..waiting import wait_until
from .cluster_slots import (
    ADDSLOTS_CHUNK,
    HOST,
    SLOTS,
    UNHEALTHY_FLAGS,
    SlotRange,
    free_cluster_port,
    slot_of,
)
from .slot_migration import SlotMigration


class RedisClusterServers:
    """A Redis Cluster of ``masters`` masters, each with ``replicas_per_master`` replicas,
    every node a ``RedisServer``; a context manager, like ``RedisServer``.

    ``node_timeout_ms`` is how long a node may be unreachable before it counts as failing:
    short, so that a failover takes seconds. A replica may take over however stale its
    copy (``cluster-replica-validity-factor 0``): a test kills a master on purpose.
    """

    def __init__(self, masters: int = 3, replicas_per_master: int = 0, node_timeout_ms: int = 1000):
        if masters < 1 or replicas_per_master < 0:
            raise ValueError("a cluster needs a master, and no negative number of replicas")
        self.replicas_per_master = replicas_per_master
        taken: set[int] = set()
        options = {
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",
            "cluster-node-timeout": str(node_timeout_ms),
            "cluster-replica-validity-factor": "0",
            # A master would wait 5 s (Redis 7's default) for more replicas to sync at once.
            "repl-diskless-sync-delay": "0",
            # Redis 7 leaves a replica out of CLUSTER SLOTS while its replication offset is
            # 0, which on an idle master lasts until the first replication ping (10 s).
            "repl-ping-replica-period": "1",
        }
        args = [word for name, value in options.items() for word in (f"--{name}", value)]
        self.servers = [
            RedisServer(*args, port=free_cluster_port(taken))
            for _ in range(masters * (1 + replicas_per_master))
        ]
        self._initial_masters = self.servers[:masters]
        self._clients: dict[int, redis.Redis] = {}
        self._ids: dict[int, str] = {}

    # -- addresses and clients ---------------------------------------------------------

    @property
    def url(self) -> str:
        """The first node's URL (a master at start): a cluster client finds the rest."""
        return f"redis://{HOST}:{self.servers[0].port}/0"

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """(host, port) of every node, for a client that must start with a node down."""
        return [(HOST, server.port) for server in self.servers]

    def client(self) -> RedisCluster:
        """A cluster client (raw bytes), following MOVED and ASK redirections."""
        nodes = [ClusterNode(host, port) for host, port in self.startup_nodes]
        return RedisCluster(startup_nodes=nodes, decode_responses=False, socket_timeout=10)

    def node_id(self, server: RedisServer) -> str:
        """The node's cluster id (kept in its nodes.conf, so the same after a restart)."""
        if server.port not in self._ids:
            self._ids[server.port] = self._ask(server, "CLUSTER", "MYID").decode()
        return self._ids[server.port]

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> RedisClusterServers:
        """Start every node, build the cluster and wait until all nodes agree on it."""
        try:
            for server in self.servers:
                server.start()
            self._assign_slots()
            self._meet()
            self._make_replicas(timeout)
            self.wait_until_consistent(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGKILL every node and remove its directory (nothing of it is worth keeping)."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        for server in self.servers:
            server.stop(kill=True)
            shutil.rmtree(server.dir, ignore_errors=True)

    def __enter__(self) -> RedisClusterServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _assign_slots(self) -> None:
        """Give each master an even share of the slots and its own config epoch (as
        ``redis-cli --cluster create`` does: no epoch collision to resolve later)."""
        count = len(self._initial_masters)
        for index, master in enumerate(self._initial_masters):
            slots = range(index * SLOTS // count, (index + 1) * SLOTS // count)
            for start in range(0, len(slots), ADDSLOTS_CHUNK):
                self._ask(master, "CLUSTER", "ADDSLOTS", *slots[start : start + ADDSLOTS_CHUNK])
            self._ask(master, "CLUSTER", "SET-CONFIG-EPOCH", index + 1)

    def _meet(self) -> None:
        """Introduce every node to the first; gossip introduces them to each other."""
        first = self.servers[0]
        for server in self.servers[1:]:
            self._ask(server, "CLUSTER", "MEET", HOST, first.port)

    def _make_replicas(self, timeout: float) -> None:
        """Make each remaining node a replica of its master, once it knows that master
        (CLUSTER REPLICATE refuses an unknown node id)."""
        replicas = self.servers[len(self._initial_masters) :]
        for index, replica in enumerate(replicas):
            master = self._initial_masters[index // self.replicas_per_master]
            self._wait_known(master, by=[replica], timeout=timeout)
            self._ask(replica, "CLUSTER", "REPLICATE", self.node_id(master))

    # -- what the cluster says -----------------------------------------------------------

    def live(self) -> list[RedisServer]:
        """The nodes whose process runs."""
        return [server for server in self.servers if server.process is not None]

    def masters(self) -> list[RedisServer]:
        """The running nodes that are masters now (failovers change which)."""
        return [server for server in self.live() if self._role(server) == "master"]

    def replicas(self) -> list[RedisServer]:
        """The running nodes that are replicas now."""
        return [server for server in self.live() if self._role(server) == "slave"]

    def master_of(self, replica: RedisServer) -> RedisServer:
        """The master ``replica`` copies from, by its own account."""
        return self._by_port(int(self._client(replica).info("replication")["master_port"]))

    def slot_ranges(self, server: RedisServer | None = None) -> tuple[SlotRange, ...]:
        """CLUSTER SLOTS as ``server`` (default: any running node) sees it, in slot order."""
        reply = self._ask(server or self.live()[0], "CLUSTER", "SLOTS")
        return tuple(
            sorted(
                SlotRange(
                    first=int(entry[0]),
                    last=int(entry[1]),
                    master=int(entry[2][1]),
                    replicas=tuple(sorted(int(node[1]) for node in entry[3:])),
                )
                for entry in reply
            )
        )

    def node_for_slot(self, slot: int) -> RedisServer:
        """The master serving ``slot`` now."""
        for span in self.slot_ranges():
            if span.first <= slot <= span.last:
                return self._by_port(span.master)
        raise LookupError(f"no node serves slot {slot}")

    @staticmethod
    def slot_of(key: bytes | str) -> int:
        """The hash slot of ``key`` (module function ``slot_of``)."""
        return slot_of(key)

    def wait_until_consistent(self, timeout: float = 30.0) -> tuple[SlotRange, ...]:
        """Wait until every running node reports ``cluster_state:ok`` and the same CLUSTER
        SLOTS, covering all slots and listing every running replica, each replica's link
        to its master being up; return that CLUSTER SLOTS."""
        try:
            return wait_until(
                self._agreed_slot_ranges,
                timeout=timeout,
                interval=0.05,
                what="all cluster nodes agree",
            )
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; the nodes say:\n{self.describe()}") from None

    def describe(self) -> str:
        """CLUSTER NODES of every running node: what to look at when a wait times out."""
        views = []
        for server in self.live():
            try:
                views.append(f"-- {server.port}:\n{self._ask(server, 'CLUSTER', 'NODES').decode()}")
            except redis.RedisError as exc:
                views.append(f"-- {server.port}: {exc!r}")
        return "\n".join(views)

    def _agreed_slot_ranges(self) -> tuple[SlotRange, ...]:
        """The CLUSTER SLOTS all nodes agree on, as ``wait_until_consistent`` says; else
        an empty tuple."""
        live = self.live()
        try:
            if not all(b"cluster_state:ok" in self._ask(s, "CLUSTER", "INFO") for s in live):
                return ()
            views = {self.slot_ranges(server) for server in live}
            replicas = self.replicas()
            links_up = all(self._replication(s)["master_link_status"] == "up" for s in replicas)
        except (redis.ConnectionError, redis.exceptions.BusyLoadingError):
            return ()  # a node (re)starting or loading
        if len(views) != 1 or not links_up:
            return ()
        (view,) = views
        covered = sum(span.last - span.first + 1 for span in view)
        listed = {port for span in view for port in span.replicas}  # a master's spans repeat it
        return view if covered == SLOTS and listed == {s.port for s in replicas} else ()

    def _wait_known(
        self, node: RedisServer, *, by: list[RedisServer], timeout: float = 30.0
    ) -> None:
        """Wait until each of ``by`` has ``node`` as a healthy, connected member."""
        node_id = self.node_id(node)
        wait_until(
            lambda: all(self._knows(observer, node_id) for observer in by),
            timeout=timeout,
            interval=0.02,
            what=f"nodes {[s.port for s in by]} know node {node.port} as connected",
        )

    def _knows(self, server: RedisServer, node_id: str) -> bool:
        """``server`` has ``node_id`` in its table as a healthy, connected member."""
        for line in self._ask(server, "CLUSTER", "NODES").decode().splitlines():
            fields = line.split()
            if fields[0] == node_id:
                return fields[7] == "connected" and not UNHEALTHY_FLAGS & set(fields[2].split(","))
        return False

    # -- failover ------------------------------------------------------------------------

    def fail_over_master(
        self, index_or_server: int | RedisServer, kill: bool = True, timeout: float = 30.0
    ) -> RedisServer:
        """Stop a master that has a replica (SIGKILL, else SIGTERM), wait until a replica
        of it has taken over and all surviving nodes agree again; return the new master.

        ``index_or_server``: a master, or its index in ``masters()``.
        """
        master = self._master(index_or_server)
        candidates = [s for s in self.replicas() if self.master_of(s) is master]
        if not candidates:
            raise ValueError(f"master {master.port} has no replica to take over")
        self._forget_client(master)
        master.stop(kill=kill)
        promoted = wait_until(
            lambda: [s for s in candidates if self._role(s) == "master"],
            timeout=timeout,
            interval=0.05,
            what=f"a replica of {master.port} is promoted",
        )
        self.wait_until_consistent(timeout)
        return promoted[0]

    def restart_node(self, server: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Start a stopped node again on its port and directory: its nodes.conf makes it
        rejoin as itself (an old master finds its slots taken and becomes a replica).
        Waits until every other node sees it connected and all agree again."""
        self._forget_client(server)
        server.start()
        others = [other for other in self.live() if other is not server]
        self._wait_known(server, by=others, timeout=timeout)
        self.wait_until_consistent(timeout)
        return server

    # -- resharding ----------------------------------------------------------------------

    def begin_slot_migration(self, slot: int, target: RedisServer) -> SlotMigration:
        """Start moving ``slot`` from its master to the master ``target``: IMPORTING on the
        target first, then MIGRATING on the source (so no moment has a source that
        redirects to a target that refuses). Move keys with ``SlotMigration.move_keys``."""
        source = self.node_for_slot(slot)
        if source is target:
            raise ValueError(f"slot {slot} is already on {target.port}")
        if self._role(target) != "master":
            raise ValueError(f"node {target.port} is not a master")
        self._ask(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        self._ask(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))
        return SlotMigration(self, slot, source, target)

    def migrate_slot(self, slot: int, target: RedisServer, batch: int = 100) -> int:
        """Move ``slot`` to the master ``target`` in one go; return how many keys moved."""
        migration = self.begin_slot_migration(slot, target)
        moved = 0
        while count := migration.move_keys(batch):
            moved += count
        migration.finish()
        return moved

    # -- plumbing ------------------------------------------------------------------------

    def _client(self, server: RedisServer) -> redis.Redis:
        """One client per node, kept: polls should not open a connection each time."""
        if server.port not in self._clients:
            self._clients[server.port] = server.client()
        return self._clients[server.port]

    def _forget_client(self, server: RedisServer) -> None:
        """Drop the client of a node about to stop: its connection will not survive."""
        client = self._clients.pop(server.port, None)
        if client is not None:
            client.close()

    def _ask(self, server: RedisServer, *command: Any) -> Any:
        return self._client(server).execute_command(*command)

    def _replication(self, server: RedisServer) -> dict[str, Any]:
        return self._client(server).info("replication")

    def _role(self, server: RedisServer) -> str:
        return str(self._replication(server)["role"])

    def _by_port(self, port: int) -> RedisServer:
        return next(server for server in self.servers if server.port == port)

    def _master(self, index_or_server: int | RedisServer) -> RedisServer:
        if isinstance(index_or_server, int):
            return self.masters()[index_or_server]
        if index_or_server not in self.masters():
            raise ValueError(f"node {index_or_server.port} is not a running master")
        return index_or_server
