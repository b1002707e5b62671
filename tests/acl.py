"""The Redis ACL rules the locked-down tests grant an app's user (tests/system): those that
tools/acl_rules.py generates from the commands really sent, which the Redis production guide
quotes (docs/guides/redis-production.md, checked in tests/unit)."""

from __future__ import annotations

from tools.acl_rules import acl_rules

#: Rules of a Redis ACL user for one app whose kombu ``global_keyprefix`` is ``app1:``
#: (broker URL ``redis://app1:secret@host:6379/0``): ``ACL SETUSER app1 <APP1_ACL>``, or
#: ``user app1 <APP1_ACL>`` in an ACL file.
APP1_ACL = acl_rules()
