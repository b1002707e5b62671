"""The delayed store itself: Redis and the standard library only, no Celery or kombu.

Key names (``keys``), the record format (``record``), delay keys (``delay_keys``), the
Lua scripts (``lua``: its ``*.lua`` files and their loader), the store (``store``: a
thin front and its facets, dead letters among them), the one seam through which due
messages leave it (``handover``), the mover loop (``mover``), the movers' heartbeats
(``heartbeats``), where a client points (``topology``), and the checks of the Redis
that holds it (``health_checks``, ``consistency``, ``store_status``).
"""
