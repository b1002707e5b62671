"""The two atomic rescue scripts, each assembled around the store's own schedule script."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from ...core.lua import ScheduleCall, register_all, script_source


@dataclass(frozen=True)
class RescueScripts:
    """The two atomic rescue operations, bound to one client."""

    rescue_list: Script
    rescue_unacked: Script

    @classmethod
    def register(cls, client: redis.Redis) -> RescueScripts:
        return register_all(cls, client, SOURCES)


#: Assembled at import (never lazily in a thread of a forking worker): a rescue is no
#: publish path. Each script (ops/rescue/lua) includes the store's schedule script as a
#: function, then schedule_all.lua.
SOURCES = {
    f.name: script_source(__name__.rpartition(".")[0], f.name)
    for f in dataclasses.fields(RescueScripts)
}


def schedule_all_args(calls: list[ScheduleCall]) -> tuple[list[Any], list[Any]]:
    """Keys and arguments of ``schedule_all`` (lua/schedule_all.lua) for these calls,
    which all have as many keys and as many arguments."""
    keys = [key for call in calls for key in call.keys]
    args = [len(calls), len(calls[0].keys), len(calls[0].args)]
    return keys, args + [arg for call in calls for arg in call.args]
