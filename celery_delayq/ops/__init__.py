"""Operations on a Celery app's delayed tasks: the public API, the health report
(``doctor``) and the rescue of vanilla ETA messages. Built on ``celery`` and ``core``;
used by the command line."""
