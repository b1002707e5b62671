"""Benchmarks on RabbitMQ: vanilla Celery (or Celery's native delayed delivery, or a
plain publish loop) against celery-delayq with its schedule in Redis, side by side on
one private RabbitMQ node per run. ``python -m benchmarks.rabbitmq [--quick]``."""
