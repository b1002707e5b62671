"""Shared helpers for the memory study (scratch; not part of celery_delayq)."""
import os, random, time, uuid, sys
sys.path.insert(0, "/work/main")
from celery_delayq.testing import RedisServer  # noqa

QUEUE = "celery"
DEST = "celery"


def payload(size, rnd):
    # realistic-ish ascii bytes (kombu JSON/base64), unique per message
    head = uuid.UUID(int=rnd.getrandbits(128), version=4).hex.encode()
    body = bytes(rnd.getrandbits(8) % 64 + 48 for _ in range(64))
    out = (head + body) * (size // len(head + body) + 1)
    return out[:size]


def gen_tasks(n, size, seed=1, size_jitter=0):
    """yield (message_id, task_id, due_ms, payload) with uuid4 ids, due over an hour."""
    rnd = random.Random(seed)
    now = int(time.time() * 1000) + 3600_000 * 24  # all in the future (no mover runs)
    cache = [payload(size + (rnd.randint(-size_jitter, size_jitter) if size_jitter else 0), rnd)
             for _ in range(64)]
    for i in range(n):
        mid = str(uuid.UUID(int=rnd.getrandbits(128), version=4))
        tid = str(uuid.UUID(int=rnd.getrandbits(128), version=4))
        due = now + rnd.randint(0, 3600_000)
        p = cache[i % 64]
        # make each payload unique (kombu delivery tag differs per message)
        p = mid.encode() + p[36:] if len(p) >= 36 else p
        yield mid, tid, due, p


def used(c):
    return int(c.info("memory")["used_memory"])


def settle(c):
    time.sleep(0.3)
    return used(c)


def mem_usage(c, key):
    return c.memory_usage(key, samples=0) or 0


def obj_enc(c, key):
    try:
        return c.object("encoding", key)
    except Exception:
        return None
