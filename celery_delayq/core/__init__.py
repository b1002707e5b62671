"""The delayed store itself: Redis and the standard library only, no Celery or kombu.

Key names (``keys``), the record format (``record``), the Lua scripts (``scripts`` and
``lua/``), the store (``store``) and the one seam through which due messages leave it
(``handover``), the mover loop (``mover``), the movers' heartbeats (``movers``), and the
checks of the Redis that holds it (``health``, ``consistency``).
"""
