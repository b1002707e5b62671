"""luacheck the store's Lua scripts and the Redis broker's (settings: .luacheckrc), three
ways:

1. each file of celery_delayq/core/lua, celery_delayq/brokers/redis/lua and
   celery_delayq/ops/rescue/lua alone; the names a file takes from the files it includes
   are declared per file in .luacheckrc;
2. each script exactly as Redis runs it (its ``--! include`` lines in place:
   ``celery_delayq.core.lua.script_source``): the prelude's names are real locals there, so a
   misspelled name or an unused local in the program Redis runs is reported (line
   numbers count from the prelude's first line);
3. the shared code (prelude.lua, helpers.lua, gates.lua, handover.lua) followed by every
   store script, each as a function of its own: a name they define that no script uses
   is reported as an unused local.

Exit status 1 on any warning or error. Run it in the project's virtualenv (it imports
the package); it needs luacheck (Debian: apt-get install lua-check).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from celery_delayq.brokers.redis import replies as consume
from celery_delayq.core import lua as store
from celery_delayq.ops.rescue import scripts as rescue

ROOT = Path(__file__).resolve().parent.parent
LUACHECK = ["luacheck", "--codes", "--no-color", "--quiet"]
LUA_FOLDERS = [
    "celery_delayq/core/lua",
    "celery_delayq/brokers/redis/lua",
    "celery_delayq/ops/rescue/lua",
]


def luacheck(*args: str, source: str | None = None) -> bool:
    """Run luacheck from the repository root; print its report only when it finds something."""
    done = subprocess.run(
        [*LUACHECK, *args], input=source, text=True, capture_output=True, cwd=ROOT
    )
    if done.returncode != 0:
        print(done.stdout + done.stderr, end="")
    return done.returncode == 0


def luacheck_source(name: str, source: str) -> bool:
    """luacheck ``source`` as if it were the file ``name`` (which selects .luacheckrc's
    settings for it)."""
    return luacheck("--filename", name, "-", source=source)


def together() -> str:
    """The prelude, helpers.lua, gates.lua and handover.lua, then every store script as
    a function, all of them returned."""
    functions = {
        f"script_{name}": store.read_source(name)
        for name in store.SCRIPT_NAMES
        if name != "schedule_many"  # assembled around schedule, checked below
    }
    bodies = "".join(f"local function {fn}()\n{body}end\n" for fn, body in functions.items())
    returned = "".join(f"  {fn},\n" for fn in functions)
    shared = f"{store.PRELUDE}{store.HELPERS}{store.GATES}{store.HANDOVER}"
    return f"{shared}{bodies}return {{\n{returned}}}\n"


def main() -> int:
    alone = all(luacheck(folder) for folder in LUA_FOLDERS)
    print(f"each file alone: {'ok' if alone else 'FAILED'}")
    store_sources = {
        name: store.script_source(store.CORE_PACKAGE, name) for name in store.SCRIPT_NAMES
    }
    push = store.script_source("celery_delayq.brokers.redis", "push_lists")
    sources = {**store_sources, **rescue.SOURCES, **consume.SOURCES, "push_lists": push}
    failed = [
        name for name, src in sources.items() if not luacheck_source(f"assembled/{name}.lua", src)
    ]
    verdict = f"FAILED: {', '.join(failed)}" if failed else "ok"
    print(f"{len(sources)} scripts as Redis runs them: {verdict}")
    used = luacheck_source("prelude_and_scripts.lua", together())
    print(f"the shared code and all store scripts together: {'ok' if used else 'FAILED'}")
    return 0 if alone and not failed and used else 1


if __name__ == "__main__":
    sys.exit(main())
