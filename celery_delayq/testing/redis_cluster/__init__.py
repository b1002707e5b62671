"""A throw-away Redis Cluster of ``redis-server`` processes, for tests of a schedule kept
on Redis Cluster.

``RedisClusterServers`` starts masters (and replicas) on free ports, assigns the 16384
hash slots and waits until every node agrees on who serves what. A test can then do to
the cluster what happens to one in production, and check what the code under test
makes of it:

- ``fail_over_master``: SIGKILL a master; its replica takes over (``restart_node``
  brings the killed node back, as a replica);
- ``begin_slot_migration`` -> ``SlotMigration``: move a slot to another master step by
  step (live resharding, as ``redis-cli --cluster reshard`` does), with load in between;
  clients meanwhile get ASK and then MOVED redirections.

Every wait polls what the nodes report (CLUSTER INFO, CLUSTER SLOTS, INFO replication),
never a fixed sleep. It runs on Redis 6.2 and 7: slots are assigned with ADDSLOTS (not
ADDSLOTSRANGE), and each node's cluster bus is on its port + 10000 (6.2 has no
``--cluster-port``).
"""

from .cluster_nodes import RedisClusterServers
from .cluster_slots import SLOTS, SlotRange, slot_of
from .slot_migration import SlotMigration

__all__ = ["SLOTS", "RedisClusterServers", "SlotMigration", "SlotRange", "slot_of"]
