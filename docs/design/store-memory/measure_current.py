"""Step 1: overhead of today's layout (real schedule.lua via DelayedStore)."""
import sys, time
from common import *  # noqa
from celery_delayq.store import DelayedStore
from celery_delayq.keys import KeySpace

n = int(sys.argv[1]); size = int(sys.argv[2]); jitter = int(sys.argv[3]) if len(sys.argv) > 3 else 0
with RedisServer() as srv:
    c = srv.client()
    store = DelayedStore(c, KeySpace(), 500)
    # warm: create stats/queues keys and load script with one task, then delete it
    store.schedule(queue=QUEUE, message_id="x", task_id="y", due_ms=10**13, destination=DEST, payload=b"z")
    store.cancel("y")
    base = settle(c)
    total_payload = 0
    t0 = time.time()
    pipe = c.pipeline(transaction=False)
    for i, (mid, tid, due, p) in enumerate(gen_tasks(n, size, size_jitter=jitter)):
        call = store.schedule_call(queue=QUEUE, message_id=mid, task_id=tid, due_ms=due,
                                   destination=DEST, payload=p)
        store.scripts.schedule(keys=call.keys, args=call.args, client=pipe)
        total_payload += len(p)
        if i % 2000 == 1999:
            pipe.execute()
    pipe.execute()
    load = time.time() - t0
    after = settle(c)
    k = store.keys.for_queue(QUEUE)
    comp = {name: mem_usage(c, key) for name, key in
            [("due", k.due), ("msg", k.messages), ("ids", k.task_index)]}
    encs = {name: obj_enc(c, key) for name, key in [("due", k.due), ("msg", k.messages), ("ids", k.task_index)]}
    grow = after - base
    print(f"current n={n} size={size} jitter={jitter} load={load:.1f}s")
    print(f"  used_memory growth/task = {grow/n:.1f} B; payload avg {total_payload/n:.1f}; "
          f"OVERHEAD = {(grow-total_payload)/n:.1f} B/task")
    for name, v in comp.items():
        print(f"  MEMORY USAGE {name:4s} = {v/n:.1f} B/task  enc={encs[name]}")
    print(f"  sum of keys/task = {sum(comp.values())/n:.1f}; minus payload = {(sum(comp.values())-total_payload)/n:.1f}")
