"""The Redis ACL rules the locked-down tests grant an app's user (tests/config/test_acl_user.py
and test_security.py): those that tools/acl_rules.py generates from the commands really
sent, which the Redis production guide quotes (docs/guides/redis-production.md, checked in
tests/project/test_readme.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from celery_delayq.testing import RedisServer
from tools.acl_rules import acl_rules

#: Rules of a Redis ACL user for one app whose kombu ``global_keyprefix`` is ``app1:``
#: (broker URL ``redis://app1:secret@host:6379/0``): ``ACL SETUSER app1 <APP1_ACL>``, or
#: ``user app1 <APP1_ACL>`` in an ACL file.
APP1_ACL = acl_rules()

#: The default user's password on a locked-down Redis.
ADMIN_PASSWORD = "admin-secret"


@contextmanager
def acl_redis(*args: str, appendonly: bool = False) -> Iterator[tuple[RedisServer, redis.Redis]]:
    """A Redis whose default user needs a password, with user ``app1`` given
    ``APP1_ACL``; the server and an admin client."""
    with RedisServer(*args, appendonly=appendonly) as server:
        setup = server.client()
        setup.execute_command("ACL", "SETUSER", "app1", *APP1_ACL.split())
        setup.config_set("requirepass", ADMIN_PASSWORD)
        admin = redis.Redis(port=server.port, password=ADMIN_PASSWORD, socket_timeout=10)
        admin.acl_log_reset()
        yield server, admin
        admin.close()
        setup.close()
