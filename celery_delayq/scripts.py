"""The Lua scripts of the delayed store, loaded from ``lua/*.lua`` as redis-py Scripts.

redis-py's ``Script`` computes the SHA locally, runs EVALSHA and reloads the script
after NOSCRIPT (a restarted or flushed Redis), so no SHA cache of our own is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import redis
from redis.commands.core import Script


@cache
def _source(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


@dataclass(frozen=True)
class StoreScripts:
    """One registered Script per atomic store operation, bound to one client."""

    schedule: Script
    move_due: Script
    cancel: Script
    replace: Script

    @classmethod
    def register(cls, client: redis.Redis) -> StoreScripts:
        return cls(
            schedule=client.register_script(_source("schedule")),
            move_due=client.register_script(_source("move_due")),
            cancel=client.register_script(_source("cancel")),
            replace=client.register_script(_source("replace")),
        )
