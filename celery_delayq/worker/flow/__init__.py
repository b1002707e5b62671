"""The worker's side of flow control: concurrency slots held while a task runs, and
Celery's own rate limits switched off where they are global."""
