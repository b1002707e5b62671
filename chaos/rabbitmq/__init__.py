"""Chaos on RabbitMQ: ``python -m chaos.rabbitmq --duration SECONDS``.

A producer, two prefork workers (``task_acks_late``, each with a mover thread), beat
with celery-delayq's scheduler and a standalone mover share a private RabbitMQ node and
a Redis (AOF, fsync always) holding the schedule, while a monkey SIGKILLs workers,
movers and beat and restarts RabbitMQ and Redis. Every task run is noted in a ledger
outside both; at the end each task sent must have run, and every second run is
attributed: RabbitMQ's redelivery (flag ``redelivered``, acks_late), a producer's
publish retry, or the hand-over's claim -> ack window (two publishes with the same
``x-delayq-id``).
"""
