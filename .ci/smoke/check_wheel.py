"""Check an installed celery-delayq wheel on its own (run by .ci/smoke_wheel.sh with the
Python of a virtualenv that holds only the wheel and its dependencies).

Imports the package from site-packages, runs ``celery delayq --help`` and ``status``,
and sends one task with ``countdown=2`` through a real ``celery worker -P solo`` on a
throw-away redis-server: the message must wait in the delayed store, then run exactly
once, not before its ETA.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import celery_delayq
import celery_delayq.beat
import celery_delayq.cli
import celery_delayq.transport
from celery_delayq.testing import RedisServer

HERE = Path(__file__).resolve().parent  # holds tinyapp.py, and nothing of the package
SOURCE_LUA = HERE.parent.parent / "celery_delayq" / "core" / "lua"  # only listed, never imported
SOURCE_WEB = HERE.parent.parent / "celery_delayq" / "web"  # the same
CELERY = str(Path(sys.executable).parent / "celery")
COUNTDOWN = 2.0


def wait_for(what: str, condition: Callable[[], object], timeout: float) -> None:
    """Poll ``condition`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"FAILED: {what} (waited {timeout:.0f} s)")
        time.sleep(0.05)


def check_installed() -> None:
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    location = Path(celery_delayq.__file__).resolve()
    assert site in location.parents, f"celery_delayq imported from {location}, not {site}"
    lua = resources.files("celery_delayq.core").joinpath("lua")
    lua_files = sorted(p.name for p in lua.iterdir() if p.name.endswith(".lua"))
    expected = sorted(p.name for p in SOURCE_LUA.glob("*.lua"))
    assert lua_files == expected, f"the wheel's Lua files {lua_files} are not {expected}"
    assert resources.files("celery_delayq").joinpath("py.typed").is_file(), "no py.typed"
    web = resources.files("celery_delayq.web")
    for folder in ("templates", "static"):  # the dashboard's files (Flask: the web extra)
        shipped = sorted(p.name for p in web.joinpath(folder).iterdir())
        expected = sorted(p.name for p in (SOURCE_WEB / folder).iterdir())
        assert shipped == expected, f"the wheel's web/{folder} {shipped} is not {expected}"
    print(f"celery_delayq {celery_delayq.__version__} from {location.parent}")
    print(f"  {len(lua_files)} Lua files, py.typed, the web pages' templates: ok")


def celery(env: dict[str, str], *args: str) -> str:
    """Run ``celery -A tinyapp ARGS``; its output, or fail with it."""
    done = subprocess.run(
        [CELERY, "-A", "tinyapp", *args], env=env, capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        raise SystemExit(f"FAILED: celery {' '.join(args)}:\n{done.stdout}{done.stderr}")
    return done.stdout


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [CELERY, "-A", "tinyapp", "worker", "-P", "solo", "--loglevel=INFO"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """Warm shutdown (SIGTERM); SIGKILL only if it does not end within 30 s."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
            raise SystemExit("FAILED: the worker did not stop on SIGTERM") from None


def run_one_delayed_task(env: dict[str, str], server: RedisServer, log: Path) -> None:
    from tinyapp import RUNS_KEY, app, record

    client = server.client()
    worker = start_worker(env, log)
    try:
        wait_for("worker answers a ping", lambda: app.control.ping(timeout=0.5), 60)
        print("worker up")
        token = uuid.uuid4().hex
        sent = time.time()
        record.apply_async((token,), countdown=COUNTDOWN)
        backlog = celery_delayq.backlog(app)
        assert [(b.queue, b.pending) for b in backlog] == [("celery", 1)], backlog
        assert client.llen("celery") == 0, "the delayed message went to the queue list"
        print("task sent with countdown=2; waiting in the delayed store:", backlog[0])
        print(celery(env, "delayq", "status").rstrip())
        wait_for("the task ran", lambda: client.llen(RUNS_KEY) > 0, COUNTDOWN + 30)
    finally:
        stop_worker(worker)
    runs = [json.loads(run) for run in client.lrange(RUNS_KEY, 0, -1)]
    assert [run[0] for run in runs] == [token], f"expected one run of {token}: {runs}"
    started = runs[0][1]
    assert started >= sent + COUNTDOWN, f"ran {sent + COUNTDOWN - started:.3f} s before its ETA"
    assert celery_delayq.backlog(app)[0].pending == 0 and client.llen("celery") == 0
    print(f"ran once, {started - sent:.2f} s after it was sent (ETA {COUNTDOWN:.0f} s)")


def main() -> None:
    check_installed()
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SMOKE_BROKER_URL": server.url, "PYTHONPATH": str(HERE)}
        os.environ["SMOKE_BROKER_URL"] = server.url  # for tinyapp imported here
        help_text = celery(env, "delayq", "--help")
        assert all(cmd in help_text for cmd in ("status", "mover", "rescue")), help_text
        print("celery -A tinyapp delayq --help: ok")
        log = Path(tmp) / "worker.log"
        try:
            run_one_delayed_task(env, server, log)
        except BaseException:
            print(f"--- worker log\n{log.read_text(errors='replace')}", file=sys.stderr)
            raise
    print("wheel smoke test: ok")


if __name__ == "__main__":
    main()
