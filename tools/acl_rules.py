"""The Redis ACL rules of one app's user, generated from the commands that are really sent,
so that the production guide's ``ACL SETUSER`` line cannot drift from the code.

The commands come from three places:

- every ``redis.call``/``redis.pcall`` (and ``call_chunked``) of every Lua script under
  ``celery_delayq/`` (Redis checks a script's calls against the caller's ACL);
- celery-delayq's Python: every redis-py command method called in the package (a name
  that is also an ordinary Python method, such as ``get`` or ``set``, only on a receiver
  named like a Redis client or pipeline), ``execute_command``/``send_command`` with a
  literal command, and the commands redis-py's helpers send (pipelines, transactions,
  scripts, pub/sub);
- the Lua that kombu's Redis transport and redis-py's Lock embed in their Python;
- ``THIRD_PARTY``: what else kombu and Celery send (their Python is not scanned).

``NOT_GRANTED`` lists commands the code uses that the user is deliberately not given.

    python tools/acl_rules.py            # print the ACL SETUSER line
    python tools/acl_rules.py --check    # exit 1 unless the guide quotes that line
    python tools/acl_rules.py --write    # put that line in the guide, in place of its own
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "celery_delayq"
GUIDE = ROOT / "docs" / "guides" / "redis-production.md"
#: Parts of the package that run no production process (the test helpers, and the demo,
#: which starts a Redis of its own) or send their commands to another Redis than the
#: app's (``periodic import --redbeat-url`` reads redbeat's).
NOT_SCANNED = {"testing", "demo", "redbeat_keys.py"}

#: Who the user is and what it may reach: keys and channels under the prefix ``app1:``
#: (broker URL ``redis://app1:secret@host:6379/0``). The PSUBSCRIBE patterns must equal
#: an allowed pattern literally (``/0.`` is the URL's database number).
PREAMBLE = [
    "reset on >secret",
    "resetchannels",  # Redis 6.2 gives a new (or reset) user every channel otherwise
    "~app1:*",  # every key: kombu's global_keyprefix prefixes them all, the store's too
    "&app1:*",  # PUBLISH and SUBSCRIBE: kombu's fanout topics, the store's wake-ups
    "&app1:/0.celery.pidbox",  # remote control: ping, inspect, mingle (PSUBSCRIBE)
    "&app1:/0.celeryev/worker.*",  # worker gossip (PSUBSCRIBE)
    "-@all",
]

#: What kombu (Redis transport, unacked restore, fanout) and Celery (worker, beat,
#: remote control) send, besides what celery-delayq's own code sends.
THIRD_PARTY = {
    "ping": "kombu's connection and health checks",
    "lpush": "kombu's publish",
    "brpop": "kombu's consume",
    "rpop": "kombu's basic_get",
    "llen": "kombu's queue sizes",
    "del": "kombu's purge and queue delete",
    "rpush": "kombu giving back unacked messages",
    "watch": "kombu's restore transaction",
    "unwatch": "kombu's restore transaction",
    "multi": "kombu's pipelines",
    "exec": "kombu's pipelines",
    "sadd": "kombu's binding tables",
    "srem": "kombu's binding tables",
    "smembers": "kombu's binding tables",
    "hset": "kombu's unacked messages",
    "hget": "kombu's unacked messages",
    "hdel": "kombu's unacked messages",
    "zadd": "kombu's unacked index",
    "zrem": "kombu's unacked index",
    "zrange": "kombu's unacked index",
    "zrangebyscore": "kombu's unacked restore",
    "set": "kombu's unacked mutex (a redis-py Lock)",
    "get": "kombu's unacked mutex release (a redis-py Lock script)",
    "publish": "kombu's fanout exchanges",
    "subscribe": "kombu's fanout exchanges",
    "unsubscribe": "kombu's fanout exchanges before kombu 5.7",
    "psubscribe": "kombu's fanout exchanges",
    "punsubscribe": "kombu's fanout exchanges",
    "evalsha": "kombu's binding scripts and redis-py's Lock",
    "script|load": "redis-py scripts after NOSCRIPT",
    "script|exists": "redis-py loading the scripts of a pipeline",
}
#: Modules of kombu and redis-py whose Python holds Lua scripts kombu runs.
EMBEDDED_LUA = ["kombu.transport.redis", "redis.lock"]

#: Commands the code sends that the user is not given, and why that is safe.
NOT_GRANTED = {
    "config|get": "it would reveal requirepass; the persistence check reads save and "
    "appendfsync with it where allowed, and says what it cannot read",
}

#: redis-py methods that send more than (or other than) their own name.
HELPERS = {
    "pipeline": ["multi", "exec"],  # transaction=True, redis-py's default
    "transaction": ["watch", "multi", "exec", "unwatch"],
    "register_script": ["evalsha", "script|load"],
    "subscribe": ["subscribe"],
    "incr": ["incrby"],
    "decr": ["decrby"],
    "delete": ["del"],
}

#: Redis container commands whose redis-py method is ``<container>_<subcommand>``.
CONTAINERS = {"script", "config", "client", "acl", "object", "memory", "function", "xinfo"}

#: redis-py command methods whose names ordinary Python objects use too: counted only on
#: a receiver named like a Redis client or pipeline.
AMBIGUOUS = {
    "append", "command", "copy", "delete", "dump", "echo", "exists", "get", "info", "keys",
    "lock", "move", "publish", "rename", "reset", "restore", "save", "scan", "set",
    "shutdown", "sort", "time", "type", "wait",
}  # fmt: skip
REDIS_RECEIVER = re.compile(r"(^|\.|_)(client|pipe|pipeline)$|^redis\.Redis\(")

LUA_CALL = re.compile(r"(?:redis\.p?call|call_chunked)\(\s*(?:'([A-Za-z]+)'|\"([A-Za-z]+)\")")
LUA_ANY_CALL = re.compile(r"redis\.p?call\(\s*([^\s,)]+)")
#: Lua functions that pass their first argument to redis.call, each call to them scanned.
LUA_WRAPPERS = {"call_chunked"}


def lua_commands() -> set[str]:
    """Every command the Lua scripts under the package call; a ``redis.call`` whose
    command is not a literal (outside ``LUA_WRAPPERS``) is an error."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.lua")):
        text = path.read_text()
        for match in LUA_CALL.finditer(text):
            found.add((match.group(1) or match.group(2)).lower())
        for match in LUA_ANY_CALL.finditer(text):
            if match.group(1)[0] in "'\"":
                continue
            function = re.findall(r"local function (\w+)", text[: match.start()])
            if not function or function[-1] not in LUA_WRAPPERS:
                raise ValueError(f"{path}: redis.call({match.group(1)}, ...) is not a literal")
    return found


def embedded_lua_commands() -> set[str]:
    """Every command the Lua scripts of ``EMBEDDED_LUA`` call (as installed here)."""
    found = set()
    for name in EMBEDDED_LUA:
        for match in LUA_CALL.finditer(inspect.getsource(importlib.import_module(name))):
            found.add((match.group(1) or match.group(2)).lower())
    return found


def redis_py_methods() -> set[str]:
    """The names of redis-py's command methods."""
    return {
        name
        for name, function in inspect.getmembers(redis.Redis, inspect.isfunction)
        if function.__module__.startswith("redis.commands")
    }


def command_of(method: str) -> list[str]:
    """The commands a redis-py method sends."""
    if method in HELPERS:
        return HELPERS[method]
    name = method.removesuffix("_iter")
    container, _, sub = name.partition("_")
    if container in CONTAINERS and sub:
        return [f"{container}|{sub}"]
    return [name]


def python_calls() -> Iterator[tuple[str, str]]:
    """(method, receiver) of every attribute call in the package's scanned modules,
    and ("<literal>", command) for execute_command/send_command with a literal."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if NOT_SCANNED & set(path.relative_to(PACKAGE).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method = node.func.attr
            if method in ("execute_command", "send_command") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    yield "<literal>", first.value.lower()
                continue
            yield method, ast.unparse(node.func.value)


def python_commands() -> set[str]:
    """Every command celery-delayq's Python sends through redis-py."""
    methods = redis_py_methods() | set(HELPERS)
    found = set()
    for method, receiver in python_calls():
        if method == "<literal>":
            found.add(receiver)
        elif method in methods and (
            method not in AMBIGUOUS or REDIS_RECEIVER.search(receiver) is not None
        ):
            found.update(command_of(method))
    return found


def commands() -> list[str]:
    """Every command the user is granted, sorted."""
    used = lua_commands() | embedded_lua_commands() | python_commands() | set(THIRD_PARTY)
    return sorted(used - set(NOT_GRANTED))


def acl_rules() -> str:
    """The rules of ``ACL SETUSER app1 <rules>`` (or ``user app1 <rules>`` in an ACL file)."""
    return " ".join([*PREAMBLE, *(f"+{command}" for command in commands())])


def acl_line() -> str:
    return f"ACL SETUSER app1 {acl_rules()}"


def quoted_line(guide: str) -> str:
    """The guide's own ``ACL SETUSER app1`` line."""
    (line,) = [line for line in guide.splitlines() if line.startswith("ACL SETUSER app1 ")]
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="check the guide quotes it")
    action.add_argument("--write", action="store_true", help="put it in the guide")
    args = parser.parse_args(argv)
    line, guide = acl_line(), GUIDE.read_text()
    if args.write:
        GUIDE.write_text(guide.replace(quoted_line(guide), line))
    elif args.check and quoted_line(guide) != line:
        print(
            f"{GUIDE.relative_to(ROOT)} does not quote the generated line (the commands the "
            f"code sends changed: run python tools/acl_rules.py --write):\n{line}"
        )
        return 1
    elif not args.check:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
