"""Names in celery_delayq that only a framework uses, for vulture (.ci/run's lint step).

vulture reads this file beside the code and counts every name below as used; nothing
runs it. Only framework entry points belong here (what Celery, kombu, py-amqp, click,
Flask, Jinja templates or Python itself call or read by name), each with who does: code
that nothing calls is removed, not listed.
"""

# ruff: noqa: B018
import amqp
import celery
import ephem
import flask
from kombu.transport import redis as kombu_redis

import celery_delayq
from celery_delayq import beat, periodic, transport, web
from celery_delayq.brokers import redis, sqs
from celery_delayq.cli.periodic import list_entries
from celery_delayq.ops import browse
from celery_delayq.web import actions, app, periodic_form, present, views
from celery_delayq.worker import bootstep, due_timers, inspect

# Python: a module's __getattr__ (PEP 562) serves its lazily imported names.
celery_delayq.__getattr__
periodic.__getattr__
transport.__getattr__
web.__getattr__

# Celery: beat calls the Scheduler's methods; a worker reads bootsteps' requires and the
# ignore_result of the task a request stands for; apps read delayq_* settings by name.
beat.Scheduler.setup_schedule
beat.Scheduler.sync
bootstep.WorkerMover.requires
due_timers.DueTimers.requires
inspect.UnregisteredTask.ignore_result
celery.Celery().conf.delayq_store_url  # set by demo/runner.py
# the worker hands its disable_rate_limits to the consumer it creates (worker/flow/global_rates.py)
celery.worker.WorkController().disable_rate_limits

# kombu: a Transport's recoverable_connection_errors; its MultiChannelPoller reads the
# Channel's _in_poll and _brpop_sent_at, which the atomic consume sets.
redis.Transport.recoverable_connection_errors
sqs.SQSTransport.recoverable_connection_errors
kombu_redis.Channel._in_poll
kombu_redis.Channel._brpop_sent_at

# py-amqp: its heartbeat check reads the connection's bytes_sent.
amqp.Connection.bytes_sent

# ephem: the observer's elevation and pressure, read when it computes the sun's events.
ephem.Observer.elev
ephem.Observer.pressure

# click: command functions, called by the command line.
list_entries

# Flask: views and before_request hooks registered by their decorators; the session
# interface's cookie methods and the app's session_interface.
views.overview
views.doctor_full_check
views.periodic_history
views.logout
actions.writable
actions.act_on_dead
actions.act_on_periodic
periodic_form.new
periodic_form.edit
periodic_form.save
app.SessionCookies.get_cookie_secure
app.SessionCookies.get_cookie_path
flask.Flask.session_interface

# Jinja templates (celery_delayq/web/templates): attributes they read.
browse.Page.budget_spent
present.Folded.folded

# botocore: a BotoCoreError formats its message from the class's fmt.
sqs.SQSUnavailable.fmt

# kombu's Redis channel: _disconnect_pools reads the Sentinel managers a settings-only
# channel (brokers/redis/channel.py, settings_of) starts without.
kombu_redis.Channel._sentinel_manager
kombu_redis.Channel._async_sentinel_manager
