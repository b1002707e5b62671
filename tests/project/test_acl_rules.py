"""tools/acl_rules.py: the ACL line is generated from the commands the code sends, and the
production guide quotes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import acl_rules

pytestmark = pytest.mark.unit


def test_the_production_guide_quotes_the_generated_acl_line() -> None:
    assert acl_rules.main(["--check"]) == 0


def test_the_rules_grant_what_beat_and_the_scripts_need_and_not_config_get() -> None:
    granted = acl_rules.commands()
    assert "incrby" in granted  # a periodic entry's version (INCR), written by beat
    assert {"pexpire", "pttl", "hexists", "evalsha"} <= set(granted)
    assert "config|get" not in granted
    # kombu's unacked mutex is a redis-py Lock, whose scripts extend and release it
    assert {"get", "del", "pexpire"} <= acl_rules.embedded_lua_commands()


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(acl_rules, "PACKAGE", tmp_path)
    return tmp_path


def test_every_lua_call_is_found_and_a_command_that_is_not_a_literal_refused(
    package: Path,
) -> None:
    (package / "a.lua").write_text(
        "local function call_chunked(command, key, values)\n"
        "  redis.call(command, key, unpack(values))\nend\n"
        "redis.call('HGET', KEYS[1], 'f')\nredis.pcall(\"ZADD\", KEYS[2], 1, 'm')\n"
        "call_chunked('LPUSH', KEYS[3], {})\n"
    )
    assert acl_rules.lua_commands() == {"hget", "zadd", "lpush"}

    (package / "b.lua").write_text("local name = 'DEL'\nredis.call(name, KEYS[1])\n")
    with pytest.raises(ValueError, match="not a literal"):
        acl_rules.lua_commands()


def test_python_calls_are_read_as_the_commands_redis_py_sends(package: Path) -> None:
    (package / "m.py").write_text(
        "client.incr('versions')\n"
        "pipe.lindex(key, -1)\n"
        "self.state.client.hscan_iter(key)\n"
        "client.script_load(source)\n"
        "connection.send_command('BLMOVE', a, b, 'RIGHT', 'LEFT', 0)\n"
        "pipe.execute_command('WAIT', 1, 100)\n"
        "with client.pipeline() as pipe: pass\n"
        # ordinary Python methods that share a name with a redis-py one:
        "logger.info('x')\nstop.set()\nrequest.form.get('a')\nevent.wait()\n"
    )
    (package / "testing").mkdir()
    (package / "testing" / "t.py").write_text("client.flushall()\n")  # not scanned

    assert acl_rules.python_commands() == {
        "incrby",
        "lindex",
        "hscan",
        "script|load",
        "blmove",
        "wait",
        "multi",
        "exec",
    }
