"""Candidate D (raw commands, memory only): zset member = record (payload inside),
task index = listpack hash buckets (task key -> due), bucket = crc32(key) % B."""
import sys, zlib, uuid
from common import *  # noqa
n, size = int(sys.argv[1]), int(sys.argv[2]); binary = sys.argv[3] == "bin"
B = max(1, n // 300)   # ~300 entries per bucket (< hash-max-listpack-entries 512)
with RedisServer() as srv:
    c = srv.client(); base = settle(c); tot = 0
    pipe = c.pipeline(transaction=False)
    for i, (mid, tid, due, p) in enumerate(gen_tasks(n, size)):
        tk = uuid.UUID(tid).bytes if binary else tid.encode()
        rec = b"%d:%s:" % (len(tk), tk) + p       # member: task key + ':' + payload (default dest)
        pipe.zadd("d:{q}:due", {rec: due})
        pipe.hset("d:{q}:i:%d" % (zlib.crc32(tk) % B), tk, due)
        tot += len(p)
        if i % 5000 == 4999: pipe.execute()
    pipe.execute(); after = settle(c)
    z = mem_usage(c, "d:{q}:due"); idx = after - base - z
    print(f"D {'bin' if binary else 'text'} n={n} size={size}: OVERHEAD {(after-base-tot)/n:.1f} B/task; "
          f"zset {z/n:.1f} (minus payload {(z-tot)/n:.1f}), index {idx/n:.1f} B/task; "
          f"bucket enc {obj_enc(c, 'd:{q}:i:0')}")
