"""The Lua scripts of the delayed store, loaded from ``lua/*.lua`` as redis-py Scripts.

Each script is ``lua/prelude.lua`` (the page layout's keys, and adding a message), then
``lua/helpers.lua`` (the rest of the shared code; not for the two schedule scripts, see
PRELUDE_ONLY), then the script's own file; the claim -> publish -> ack scripts have
``lua/handover.lua`` before their own. ``schedule_many`` runs the prelude once per queue
shard of a chunk.

redis-py's ``Script`` computes the SHA locally, runs EVALSHA and reloads the script
after NOSCRIPT (a restarted or flushed Redis, or on a Redis Cluster a node that has not
seen it: a promoted replica, a new master), so no SHA cache of our own is kept. In a
pipeline it cannot do that; ``run_pipelined`` does.

A script's files are read, and its Script made, on its first use in a process: one that
only publishes reads the prelude and ``schedule.lua``, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources
from typing import Any, NamedTuple, TypeVar

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError


def read_lua(package: str, name: str) -> str:
    """The text of ``<package>/lua/<name>.lua``."""
    # Works from a zipped install on Python 3.9 too, where __package__ is still None while
    # zipimport runs a module, and Traversable.joinpath takes one step at a time (several
    # only from 3.11).
    lua = resources.files(package).joinpath("lua")
    return lua.joinpath(f"{name}.lua").read_text("utf-8")


ScriptSetT = TypeVar("ScriptSetT")


def register_all(
    cls: Callable[..., ScriptSetT], client: redis.Redis, sources: dict[str, str]
) -> ScriptSetT:
    """A dataclass of Scripts (one field per source name), registered on ``client``."""
    return cls(**{name: client.register_script(source) for name, source in sources.items()})


#: ``lua/`` beside this module, found at import: a first read in a thread (a mover's)
#: then imports nothing, and so never holds an import lock while a prefork pool forks.
_LUA = resources.files(__name__.rpartition(".")[0]).joinpath("lua")


def read_source(name: str) -> str:
    """The text of one of the store's scripts (``lua/<name>.lua`` beside this module)."""
    return _LUA.joinpath(f"{name}.lua").read_text("utf-8")


class StoreScripts:
    """One Script per atomic store operation, bound to one client; each is assembled
    (``source``), and its SHA computed, on first use."""

    client: redis.Redis

    schedule: Script
    schedule_keyed: Script
    schedule_many: Script
    move_due: Script
    cancel: Script
    replace: Script
    count: Script
    pending: Script
    purge: Script
    repair: Script
    claim_due: Script
    ack_claimed: Script
    release_claimed: Script
    resend_dead: Script
    write_ahead: Script

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    @classmethod
    def register(cls, client: redis.Redis) -> StoreScripts:
        return cls(client)

    def __getattr__(self, name: str) -> Script:
        """A script not used yet (one used is in the instance's ``__dict__``)."""
        if name not in SCRIPT_NAMES:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        script = self.client.register_script(source(name))
        return self.__dict__.setdefault(name, script)  # type: ignore[no-any-return]


#: The store's scripts, as StoreScripts names them.
SCRIPT_NAMES = tuple(
    name for name, kind in StoreScripts.__annotations__.items() if kind == "Script"
)


class ScheduleCall(NamedTuple):
    """The KEYS and ARGV of one ``schedule.lua`` call."""

    keys: list[str]
    args: list[Any]


#: One script call: the script, its KEYS and its ARGV.
ScriptCall = tuple[Script, Sequence[Any], Sequence[Any]]


def run_pipelined(client: redis.Redis, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run script calls in one pipelined round trip (per node, on a cluster), each still
    its own atomic call; their replies in order.

    A call refused with NOSCRIPT did nothing, so it alone is run again on its own, where
    ``Script`` loads the script first. Any other error is raised once every call ran.
    """
    if not calls:
        return []
    with client.pipeline(transaction=False) as pipe:
        for script, keys, args in calls:
            # execute_command: redis-py refuses pipe.evalsha on a cluster, though EVALSHA
            # routes by its keys like any other command
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        replies = pipe.execute(raise_on_error=False)
    for i, reply in enumerate(replies):
        if isinstance(reply, NoScriptError):
            script, keys, args = calls[i]
            replies[i] = script(keys=keys, args=args)
    error = next((reply for reply in replies if isinstance(reply, Exception)), None)
    if error is not None:
        raise error
    return list(replies)


#: Scripts with the prelude alone: a publish runs them, and every function the Lua
#: defines costs Redis time on each call (helpers.lua would add ~1 us to ~12).
PRELUDE_ONLY = frozenset({"schedule", "schedule_many"})
HANDOVER_SCRIPTS = frozenset({"claim_due", "ack_claimed", "release_claimed", "resend_dead"})


@cache
def source(name: str) -> str:
    """The whole text of a script: ``name`` is one of SCRIPT_NAMES, or one of the
    assembled texts ``SCHEDULE_FUNCTION``, ``SCHEDULE_SHARD``; or a file's
    (``PRELUDE``, ``HELPERS``, ``HANDOVER``, ``PUSH_LISTS``: ``lua/<lower-case name>``)."""
    if name == "SCHEDULE_FUNCTION":
        # The store's own schedule script as a Lua function, so a rescue (ops/rescue)
        # schedules each message with the very code (and arguments) a publish uses.
        return f"local function schedule(KEYS, ARGV)\n{source('schedule')}\nend\n"
    if name == "SCHEDULE_SHARD":
        # prelude.lua for one queue shard, as a function: ``each(store_message)`` then
        # stores many messages of the shard with it (schedule_many.lua).
        return (
            "local function schedule_shard(KEYS, ARGV, each)\n"
            f"{source('PRELUDE')}return each(store_message)\nend\n"
        )
    if name.isupper():
        return read_source(name.lower())
    if name == "schedule_many":
        return source("SCHEDULE_SHARD") + read_source(name)
    return (
        source("PRELUDE")
        + ("" if name in PRELUDE_ONLY else source("HELPERS"))
        + (source("HANDOVER") if name in HANDOVER_SCRIPTS else "")
        + read_source(name)
    )


#: The texts ``source`` makes, as module attributes made on first use (PEP 562).
_TEXTS = frozenset(
    {"PRELUDE", "HELPERS", "HANDOVER", "PUSH_LISTS", "SCHEDULE_FUNCTION", "SCHEDULE_SHARD"}
)


def __getattr__(name: str) -> Any:
    if name in _TEXTS:
        return source(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ShardChunk(NamedTuple):
    """The part of a chunk that goes to one queue shard (one group of
    ``schedule_many.lua``): its keys and shared arguments once, then the messages, added
    to its two lists."""

    keys: list[str]  # as schedule.lua takes them
    page_args: list[Any]  # ARGV[1], ARGV[2] of the prelude
    queue: str
    wakeup_channel: str
    #: (message key, due time, record) of each message, flat: schedule.lua's
    #: ARGV[3], [4], [5].
    triples: list[Any]
    #: Indices of its messages in the whole chunk (which were lost if it fails).
    indices: list[int]


def schedule_many_args(parts: Sequence[ShardChunk]) -> tuple[list[Any], list[Any]]:
    """KEYS and ARGV of one ``schedule_many.lua`` call storing these shards' parts."""
    keys: list[Any] = []
    args: list[Any] = [len(parts), len(parts[0].keys)]
    for part in parts:
        keys.extend(part.keys)
        args.extend((*part.page_args, part.queue, part.wakeup_channel, len(part.indices)))
        args.extend(part.triples)
    return keys, args
