"""The Lua scripts, loaded from ``lua/*.lua`` beside their users as redis-py Scripts.

This package is the store's own ``lua/`` folder: its scripts and the shared code sit
beside this loader, which the Redis broker (``brokers/redis/lua``) and ops
(``ops/rescue/lua``) use for theirs.

A script names what it includes, in its header: each line ``--! include <file>.lua`` is
replaced by that file's text, itself assembled the same way (``script_source``). A file
is looked for in the including file's own ``lua/`` folder, then in the store's
(``core/lua``), where the shared code lives: ``prelude.lua`` (the page layout's keys, and
adding a message), ``helpers.lua`` (the rest of the shared code), ``handover.lua`` (the
claim -> publish -> ack scripts' start), and wrappers that run shared code as a function
(``schedule_shard.lua`` for ``schedule_many``, ``schedule_shard_gated.lua`` for
``schedule_many_gated``, both then ``schedule_chunk.lua``; ``schedule_function.lua`` for
the rescue scripts). The two schedule scripts include the prelude alone: every function the
Lua defines costs Redis time on each call (helpers.lua would add ~1 us to ~12).

redis-py's ``Script`` computes the SHA locally, runs EVALSHA and reloads the script
after NOSCRIPT (a restarted or flushed Redis, or on a Redis Cluster a node that has not
seen it: a promoted replica, a new master), so no SHA cache of our own is kept. In a
pipeline it cannot do that; ``run_pipelined`` does.

A script's files are read, and its Script made, on its first use in a process: one that
only publishes reads the prelude and ``schedule.lua``, nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


ScriptSetT = TypeVar("ScriptSetT")


def register_all(
    cls: Callable[..., ScriptSetT], client: redis.Redis, sources: dict[str, str]
) -> ScriptSetT:
    """A dataclass of Scripts (one field per source name), registered on ``client``."""
    return cls(**{name: client.register_script(source) for name, source in sources.items()})


#: The store's ``lua/`` folder, found at import: a first read in a thread (a mover's) then
#: imports nothing, and so never holds an import lock while a prefork pool forks.
CORE_PACKAGE = __name__.rpartition(".")[0]  # celery_delayq.core, whose lua/ is this package
_CORE_LUA = resources.files(CORE_PACKAGE).joinpath("lua")
#: ``--! include <file>.lua``, a whole line, with its line end.
INCLUDE = re.compile(r"^--! include ([\w-]+\.lua)[ \t]*(?:\n|$)", re.M)


def lua_folder(package: str) -> Traversable:
    """``<package>/lua``. Works from a zipped install on Python 3.9 too, where
    ``Traversable.joinpath`` takes one step at a time (several only from 3.11)."""
    return _CORE_LUA if package == CORE_PACKAGE else resources.files(package).joinpath("lua")


def includes(text: str) -> list[str]:
    """The files a script's text includes, in order."""
    return INCLUDE.findall(text)


def find_lua(package: str, file: str) -> tuple[str, str]:
    """The package whose ``lua/`` holds ``file`` (``package``'s own, else the store's),
    and the file's text."""
    for home in dict.fromkeys((package, CORE_PACKAGE)):
        found = lua_folder(home).joinpath(file)
        if found.is_file():
            return home, found.read_text("utf-8")
    raise FileNotFoundError(f"{file}: in neither {package}/lua nor {CORE_PACKAGE}/lua")


@cache
def script_source(package: str, name: str) -> str:
    """The whole text of the script ``<package>/lua/<name>.lua``, its includes in place."""
    return _assemble(package, f"{name}.lua", ())


def _assemble(package: str, file: str, including: tuple[str, ...]) -> str:
    if file in including:
        raise ValueError(f"Lua include cycle: {' -> '.join((*including, file))}")
    home, text = find_lua(package, file)
    inner = (*including, file)
    return INCLUDE.sub(lambda match: _assemble(home, match.group(1), inner), text)


def read_source(name: str) -> str:
    """The text of one of the store's files (``core/lua/<name>.lua``), as written."""
    return _CORE_LUA.joinpath(f"{name}.lua").read_text("utf-8")


class StoreScripts:
    """One Script per atomic store operation, bound to one client; each is assembled
    (``source``), and its SHA computed, on first use."""

    client: redis.Redis

    schedule: Script
    schedule_gated: Script
    schedule_keyed: Script
    schedule_many: Script
    schedule_many_gated: Script
    move_due: Script
    gate_hold: Script
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
    swap_field: Script
    run_start: Script
    run_end: Script
    slot_take: Script
    slot_end: Script

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    @classmethod
    def register(cls, client: redis.Redis) -> StoreScripts:
        return cls(client)

    def __getattr__(self, name: str) -> Script:
        """A script not used yet (one used is in the instance's ``__dict__``)."""
        if name not in SCRIPT_NAMES:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        script = self.client.register_script(script_source(CORE_PACKAGE, name))
        kept: Script = self.__dict__.setdefault(name, script)  # another thread's, if first
        return kept


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

    A call refused with NOSCRIPT (a Redis that has not seen the script: a fresh, flushed
    or restarted one) did nothing: its script is loaded once (SCRIPT LOAD), then the call
    alone is run again. Calling the ``Script`` at once would send the whole call a
    second time only to be refused again before ``Script`` loads it (a bulk chunk of
    hundreds of messages, three times). Any other error is raised once every call ran.
    """
    if not calls:
        return []
    with client.pipeline(transaction=False) as pipe:
        for script, keys, args in calls:
            # execute_command: redis-py refuses pipe.evalsha on a cluster, though EVALSHA
            # routes by its keys like any other command
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        replies = pipe.execute(raise_on_error=False)
    loaded: set[str] = set()
    for i, reply in enumerate(replies):
        if isinstance(reply, NoScriptError):
            script, keys, args = calls[i]
            if script.sha not in loaded:  # on a cluster, on every master
                client.script_load(script.script)
                loaded.add(script.sha)
            replies[i] = script(keys=keys, args=args)  # still loads it after a flush now
    error = next((reply for reply in replies if isinstance(reply, Exception)), None)
    if error is not None:
        raise error
    return list(replies)


#: The shared files as written, as module attributes read on first use (PEP 562): the
#: tests and the Lua lint put them in front of code of their own.
_TEXTS = frozenset({"PRELUDE", "HELPERS", "GATES", "HANDOVER"})


def __getattr__(name: str) -> Any:
    if name in _TEXTS:
        return read_source(name.lower())
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
    #: For ``schedule_many_gated.lua``, per message "1" when it was sent without an ETA,
    #: else "0" (one string after the triples); None for ``schedule_many.lua``, whose
    #: messages need none: the flag only takes a limited message's due time back to the
    #: store's now.
    no_eta: list[str] | None = None


def schedule_many_args(parts: Sequence[ShardChunk]) -> tuple[list[Any], list[Any]]:
    """KEYS and ARGV of one ``schedule_many.lua`` (or ``schedule_many_gated.lua``) call
    storing these shards' parts."""
    keys: list[Any] = []
    args: list[Any] = [len(parts), len(parts[0].keys)]
    for part in parts:
        keys.extend(part.keys)
        args.extend((*part.page_args, part.queue, part.wakeup_channel, len(part.indices)))
        args.extend(part.triples)
        if part.no_eta is not None:
            args.append("".join(part.no_eta))
    return keys, args
