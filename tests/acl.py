"""The Redis ACL rules the locked-down tests grant an app's user (tests/system), which the
Redis production guide quotes (docs/guides/redis-production.md, checked in tests/unit)."""

from __future__ import annotations

#: Rules of a Redis ACL user for one app whose kombu ``global_keyprefix`` is ``app1:``
#: (broker URL ``redis://app1:secret@host:6379/0``): ``ACL SETUSER app1 <APP1_ACL>``, or
#: ``user app1 <APP1_ACL>`` in an ACL file. Keys and channels are confined to the prefix;
#: the commands are exactly what kombu, Celery (worker, producer, remote control, beat)
#: and celery-delayq (store, Lua scripts, movers, CLI) send.
APP1_ACL = " ".join(
    [
        "reset on >secret",
        # Redis 6.2 gives a new (or reset) user every channel unless told otherwise.
        "resetchannels",
        # Every key kombu and the store use: global_keyprefix prefixes them all, including
        # _kombu.binding.*, unacked, unacked_index, unacked_mutex and the store's keys.
        "~app1:*",
        # PUBLISH and SUBSCRIBE: kombu's fanout topics and the store's wake-up channel.
        "&app1:*",
        # PSUBSCRIBE patterns must equal an allowed pattern literally: kombu subscribes to
        # fanout exchanges with PSUBSCRIBE (the /0. is the broker URL's db number).
        "&app1:/0.celery.pidbox",  # remote control: ping, inspect, mingle
        "&app1:/0.celeryev/worker.*",  # worker gossip (not with --without-gossip)
        "-@all",
        "+ping",  # kombu's connection and health checks
        "+info",  # start-up warnings and `delayq doctor` (persistence, eviction, version)
        "+lpush +brpop +llen +del",  # kombu's queue lists
        # celery-delayq's consume: taking (consume.lua), waiting (BLMOVE into a landing
        # list), giving back and returning landed messages, checking a restore's score
        "+rpop +blmove +lmove +zscore",
        "+rpush +watch +unwatch +multi +exec",  # kombu giving back unacked messages; pipelines
        "+sadd +srem +smembers",  # kombu's binding tables; the store's queue set
        "+hset +hget +hdel",  # kombu's unacked messages
        "+zadd +zrem +zrange +zrangebyscore",  # kombu's unacked index and binding deadlines
        "+set +get",  # kombu's unacked mutex (a redis-py Lock; its release script GETs)
        # fanout (kombu < 5.7 leaves topics with UNSUBSCRIBE), the store's wake-ups:
        "+publish +subscribe +unsubscribe +psubscribe +punsubscribe",
        "+evalsha +script|load +script|exists +time",  # Lua scripts: kombu's and the store's
        # The store's own (in its Lua scripts and Python), beyond those above:
        "+exists +unlink +hlen +hsetnx +hmget +hgetall +hincrby +hscan +type",
        "+zcard +zcount +zrevrangebyscore +zremrangebyrank",
        "+lrange +lrem",  # `delayq rescue`
    ]
)
# Not needed by Celery and celery-delayq, but by some kombu features and settings:
# +pexpire (queues with x-expires), +select (a broker URL db other than 0),
# +client|setname (the client_name transport option).
