"""Adapters to kombu's brokers: one folder per broker (redis/, amqp/, sqs.py), each a
concrete channel subclassing kombu's own, and what all of them share (common/: the
diversion of a future-ETA message to the store, message fields, settings). connect.py
gives a Celery app its store; broker_health.py checks the broker for the doctor.
Built on ``core``; no broker imports another."""
