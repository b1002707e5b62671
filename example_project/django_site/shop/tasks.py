"""The shop's tasks (found by ``app.autodiscover_tasks()``)."""

from celery import shared_task
from django.utils import timezone

from .models import Order

#: How long after an order its confirmation goes out (seconds).
CONFIRM_AFTER = 2


@shared_task
def confirm_order(order_id: int) -> None:
    """Mark the order confirmed (a real shop would send an e-mail here)."""
    Order.objects.filter(pk=order_id, confirmed_at__isnull=True).update(confirmed_at=timezone.now())
