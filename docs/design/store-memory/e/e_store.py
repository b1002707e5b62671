"""Prototype of the paged layout ("E"): task-keyed record hash + listpack pages of (key, due)."""
from __future__ import annotations
import hashlib, os, uuid
from dataclasses import dataclass
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
PRELUDE = open(os.path.join(HERE, "prelude.lua")).read()
NAMES = ["schedule", "move_due", "cancel", "replace", "range", "backlog"]
LATENESS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)


def task_key(task_id: str | None, message_id: str) -> bytes:
    """16 raw bytes for a canonical uuid task id; b'\\x00'+text otherwise (b'\\x01\\x01'+text
    when that would be 16 bytes long); b'\\x03'+uuid bytes (or text) for messages without one."""
    if task_id:
        try:
            u = uuid.UUID(task_id)
            if str(u) == task_id:
                return u.bytes
        except ValueError:
            pass
        raw = task_id.encode()
        return b"\x01\x01" + raw if len(raw) == 15 else b"\x00" + raw
    try:
        return b"\x03" + uuid.UUID(message_id).bytes
    except ValueError:
        return b"\x03" + message_id.encode()


def task_id_of(key: bytes) -> str:
    if key[:1] == b"\xff" and len(key) != 16:
        key = key[key.index(b":") + 1:]
    if len(key) == 16:
        return str(uuid.UUID(bytes=key))
    if key[:1] == b"\x00":
        return key[1:].decode()
    if key[:1] == b"\x01":
        return key[2:].decode()
    return ""


def encode_tail(destination: str, default: str, payload: bytes) -> bytes:
    if destination == default:
        return b":" + payload
    d = destination.encode()
    return b"d%d:%s:" % (len(d), d) + payload


def decode_record(rec: bytes, default: str):
    i = 0
    while rec[i:i + 1].isdigit():
        i += 1
    due = int(rec[:i]); dest = default
    if rec[i:i + 1] == b"d":
        colon = rec.index(b":", i)
        n = int(rec[i + 1:colon]); dest = rec[colon + 1:colon + 1 + n].decode(); i = colon + 1 + n
    assert rec[i:i + 1] == b":"
    return due, dest, rec[i + 1:]


@dataclass
class Keys:
    prefix: str
    queue: str

    def __post_init__(self):
        t = f"{self.prefix}:{{{self.queue}}}"
        self.msg, self.pages, self.dup, self.stats = f"{t}:msg", f"{t}:pages", f"{t}:dup", f"{t}:stats"
        self.page_prefix = f"{t}:p:"

    def as_list(self):
        return [self.msg, self.pages, self.dup, self.stats]


class PagedStore:
    def __init__(self, client, prefix="delayq", page_max=120, batch=500, global_keyprefix=""):
        self.client, self.prefix, self.page_max, self.batch = client, prefix, page_max, batch
        self.gkp = global_keyprefix
        self.scripts = {n: client.register_script(
            PRELUDE + open(os.path.join(HERE, f"{n}.lua")).read()) for n in NAMES}
        self.queues_key, self.wakeup = f"{prefix}:queues", f"{prefix}:wakeup"

    def keys(self, queue):
        return Keys(self.prefix, queue)

    def default_dest(self, queue):
        return self.gkp + queue

    def _head(self, k):
        return [k.page_prefix, self.page_max]

    def schedule_call(self, *, queue, message_id, task_id, due_ms, destination, payload):
        k = self.keys(queue)
        return (k.as_list() + [self.queues_key],
                self._head(k) + [task_key(task_id, message_id), due_ms,
                                 encode_tail(destination, self.default_dest(queue), payload),
                                 queue, self.wakeup])

    def schedule(self, client=None, **f):
        keys, args = self.schedule_call(**f)
        return self.scripts["schedule"](keys=keys, args=args, client=client or self.client)

    def move_due(self, queue):
        k = self.keys(queue)
        return self.scripts["move_due"](keys=k.as_list(), args=self._head(k) + [
            self.batch, self.default_dest(queue), *LATENESS])

    def cancel_in(self, queue, task_id, client=None):
        k = self.keys(queue)
        return self.scripts["cancel"](keys=k.as_list(), args=self._head(k) + [task_key(task_id, "")],
                                      client=client or self.client)

    def message_keys(self, queue, task_id):
        k = self.keys(queue); tk = task_key(task_id, "")
        seqs = self.client.hget(k.dup, tk)
        return [tk] + [b"\xff" + s + b":" + tk for s in (seqs or b"").split()]

    def reschedule_in(self, queue, task_id, due_ms, rewrite: Callable[[bytes], bytes]):
        k = self.keys(queue); changed = 0
        for mk in self.message_keys(queue, task_id):
            raw = self.client.hget(k.msg, mk)
            if raw is None:
                continue
            _, dest, payload = decode_record(raw, self.default_dest(queue))
            new = b"%d" % due_ms + encode_tail(dest, self.default_dest(queue), rewrite(payload))
            changed += self.scripts["replace"](keys=k.as_list(), args=self._head(k) + [
                mk, raw, new, due_ms, self.wakeup])
        return changed

    def pending(self, queue, low="-inf", high="+inf", limit=100, newest_first=False):
        k = self.keys(queue)
        flat = self.scripts["range"](keys=k.as_list(), args=self._head(k) + [
            low, high, limit, "1" if newest_first else "0"])
        pairs = list(zip(flat[::2], flat[1::2]))
        raws = self.client.hmget(k.msg, [p[0] for p in pairs]) if pairs else []
        return [(task_id_of(key), int(float(s)), decode_record(r, self.default_dest(queue)))
                for (key, s), r in zip(pairs, raws) if r is not None]

    def find_in(self, queue, task_id):
        k = self.keys(queue); mks = self.message_keys(queue, task_id)
        return [decode_record(r, self.default_dest(queue)) for r in self.client.hmget(k.msg, mks) if r]

    def backlog(self, queue):
        k = self.keys(queue)
        return self.scripts["backlog"](keys=k.as_list(), args=self._head(k))
