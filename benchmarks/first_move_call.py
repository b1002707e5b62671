"""``python -m benchmarks.first_move_call``: what the first move call of big messages costs
a fresh server, and why. The move script is loaded and warmed on 2,000 small messages
first; then 62 messages of 65 kB are moved call by call, 3 rounds on the same server;
SLOWLOG (threshold 0) gives each call's Redis time, INFO memory the RSS around it."""

import redis

from benchmarks.pathological import DEFAULT_BUDGET
from benchmarks.store_tools import payload, server_time_ms, task_id
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.testing import RedisServer


def main() -> None:
    with RedisServer() as server:
        c = redis.Redis.from_url(server.url)
        print("redis", c.info("server")["redis_version"], c.info("memory")["mem_allocator"])
        store = DelayedStore(c, KeySpace(), 500, move_call_budget=DEFAULT_BUDGET)
        # warm: the move script loaded and run on 2,000 small messages
        due = server_time_ms(c) - 1
        store.schedule_many(
            Scheduled("warm", f"w{i}", task_id(i), due, "warm", payload(i)) for i in range(2000)
        )
        while store.move_due("warm").moved:
            pass
        c.delete("warm")
        c.config_set("slowlog-log-slower-than", 0)
        for rnd in range(3):
            due = server_time_ms(c) - 1
            for i in range(62):
                store.schedule(
                    Scheduled(
                        "big", f"b{rnd}-{i}", task_id(100 + i), due, "big", payload(i, 65_000)
                    )
                )
            used_before = c.info("memory")["used_memory_rss"]
            c.slowlog_reset()
            calls = 0
            while store.move_due("big").moved:
                calls += 1
            entries = [e for e in c.slowlog_get(1000) if e["command"].startswith(b"EVALSHA")]
            durs = [int(e["duration"]) for e in reversed(entries)]
            print(
                f"round {rnd}: {calls} move calls, us per EVALSHA in order: {durs[:12]}; "
                f"rss before {used_before / 1e6:.1f} MB "
                f"after {c.info('memory')['used_memory_rss'] / 1e6:.1f} MB"
            )
            c.delete("big")
        print(
            {
                k: v
                for k, v in c.info("commandstats").items()
                if k in ("cmdstat_evalsha", "cmdstat_script", "cmdstat_eval")
            }
        )
        store.close()


if __name__ == "__main__":
    main()
