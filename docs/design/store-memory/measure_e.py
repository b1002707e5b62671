"""Memory + Lua time of the paged prototype (E) and, with 'current', of today's store."""
import sys, time, random, uuid
sys.path.insert(0, "/tmp/storestudy/e")
from common import *  # noqa
from e_store import PagedStore
from celery_delayq.store import DelayedStore
from celery_delayq.keys import KeySpace

which, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
jitter = int(sys.argv[4]) if len(sys.argv) > 4 else 0

def usec(c):
    s = c.info("commandstats").get("cmdstat_evalsha", {})
    return s.get("usec_per_call", 0.0), s.get("calls", 0)

with RedisServer() as srv:
    c = srv.client()
    if which == "e":
        st = PagedStore(c)
        sched = lambda pipe, **f: st.schedule(client=pipe, **f)
        cancel = lambda t: st.cancel_in(QUEUE, t)
        resched = lambda t, d: st.reschedule_in(QUEUE, t, d, lambda p: p[:-1] + b"X")
        move = lambda: st.move_due(QUEUE)
        sched(c, queue=QUEUE, message_id="x", task_id="y", due_ms=10**13, destination=DEST, payload=b"z")
        cancel("y")
    else:
        st = DelayedStore(c, KeySpace(), 500)
        def sched(pipe, **f):
            call = st.schedule_call(**f); st.scripts.schedule(keys=call.keys, args=call.args, client=pipe)
        cancel = st.cancel
        resched = lambda t, d: st.reschedule(t, d, lambda p: p[:-1] + b"X")
        move = lambda: st.move_due(QUEUE)
        sched(c, queue=QUEUE, message_id="x", task_id="y", due_ms=10**13, destination=DEST, payload=b"z")
        cancel("y")
    base = settle(c)
    c.config_resetstat()
    tot = 0; tids = []
    pipe = c.pipeline(transaction=False); t0 = time.time()
    for i, (mid, tid, due, p) in enumerate(gen_tasks(n, size, size_jitter=jitter)):
        sched(pipe, queue=QUEUE, message_id=mid, task_id=tid, due_ms=due, destination=DEST, payload=p)
        tot += len(p)
        if i % 100 == 0: tids.append(tid)
        if i % 2000 == 1999: pipe.execute()
    pipe.execute(); load = time.time() - t0
    sched_us = usec(c)
    after = settle(c)
    keys = c.keys(f"delayq:{{{QUEUE}}}:*")
    per = {}
    for key in keys:
        name = key.decode().split(":")[2]
        per[name] = per.get(name, 0) + mem_usage(c, key)
    encs = {}
    for key in keys:
        e = obj_enc(c, key); nm = key.decode().split(":")[2]
        encs.setdefault(nm, {}).setdefault(e.decode(), 0); encs[nm][e.decode()] += 1
    print(f"{which} n={n} size={size} jitter={jitter} load={load:.1f}s  keys={len(keys)}")
    print(f"  OVERHEAD (used_memory growth - payload) = {(after-base-tot)/n:.1f} B/task "
          f"(growth {(after-base)/n:.1f}, payload {tot/n:.1f})")
    for nm, v in sorted(per.items()):
        print(f"  MEMORY USAGE {nm:6s} {v/n:8.1f} B/task  {encs[nm]}")
    print(f"  schedule Lua {sched_us[0]:.1f} us/call")
    # cancel 300 random, reschedule 300 random (to a time within the hour)
    rnd = random.Random(9); sample = rnd.sample(tids, min(600, len(tids)))
    c.config_resetstat(); t0 = time.time()
    for t in sample[:300]: assert cancel(t) == 1
    print(f"  cancel: Lua {usec(c)[0]:.1f} us/call, wall {(time.time()-t0)/300*1e6:.0f} us")
    c.config_resetstat(); t0 = time.time()
    for t in sample[300:]: assert resched(t, int(time.time()*1000) + 3600_000*24 + 1800_000) == 1
    print(f"  reschedule: Lua {usec(c)[0]:.1f} us/call (replace script), wall {(time.time()-t0)/300*1e6:.0f} us")
    # move: 10 batches of 500 due messages
    now = int(time.time() * 1000)
    pipe = c.pipeline(transaction=False)
    for i, (mid, tid, due, p) in enumerate(gen_tasks(5000, size, seed=77)):
        sched(pipe, queue=QUEUE, message_id=mid, task_id=tid, due_ms=now - 60000 + i, destination=DEST, payload=p)
    pipe.execute()
    c.config_resetstat(); t0 = time.time()
    for _ in range(10):
        r = move(); m = r[0] if isinstance(r, list) else r.moved
        assert m == 500, r
    print(f"  move 500: Lua {usec(c)[0]/1000:.2f} ms/call, wall {(time.time()-t0)/10*1000:.2f} ms")
    c.delete(DEST)
