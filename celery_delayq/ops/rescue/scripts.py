"""The two atomic rescue scripts, each assembled around the store's own schedule script."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from ...core.lua_scripts import SCHEDULE_FUNCTION, ScheduleCall, read_source, register_all


@dataclass(frozen=True)
class RescueScripts:
    """The two atomic rescue operations, bound to one client."""

    rescue_list: Script
    rescue_unacked: Script

    @classmethod
    def register(cls, client: redis.Redis) -> RescueScripts:
        return register_all(cls, client, SOURCES)


#: Read at import (never lazily in a thread of a forking worker): a rescue is no publish
#: path, so what ``celery_delayq.core.lua_scripts.source`` makes on first use is made here.
SOURCES = {
    f.name: SCHEDULE_FUNCTION + read_source("schedule_all") + read_source(f.name)
    for f in dataclasses.fields(RescueScripts)
}


def schedule_all_args(calls: list[ScheduleCall]) -> tuple[list[Any], list[Any]]:
    """Keys and arguments of ``schedule_all`` (core/lua/schedule_all.lua) for these calls,
    which all have as many keys and as many arguments."""
    keys = [key for call in calls for key in call.keys]
    args = [len(calls), len(calls[0].keys), len(calls[0].args)]
    return keys, args + [arg for call in calls for arg in call.args]
