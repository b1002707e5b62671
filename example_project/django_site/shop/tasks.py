"""The shop's tasks (found by ``app.autodiscover_tasks()``)."""

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from .models import Order

#: How long after an order its confirmation goes out (seconds).
CONFIRM_AFTER = 2


@shared_task
def confirm_order(order_id: int) -> None:
    """Mark the order confirmed (a real shop would send an e-mail here)."""
    Order.objects.filter(pk=order_id, confirmed_at__isnull=True).update(confirmed_at=timezone.now())


@shared_task
def confirm_overdue_orders() -> int:
    """Confirm the orders whose confirmation is a minute overdue: a periodic safety net
    (settings.py's ``CELERY_BEAT_SCHEDULE`` runs it); how many it confirmed."""
    overdue = timezone.now() - timedelta(seconds=CONFIRM_AFTER + 60)
    return Order.objects.filter(confirmed_at__isnull=True, placed_at__lt=overdue).update(
        confirmed_at=timezone.now()
    )
