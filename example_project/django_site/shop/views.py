"""Placing an order schedules its confirmation once the order is committed."""

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from .models import Order
from .tasks import CONFIRM_AFTER, confirm_order


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """Create an order; its confirmation is sent ``CONFIRM_AFTER`` seconds later.

    ``on_commit``: the task is published only if the order is saved, and after it is, so
    the worker never looks for an order that is not there (or was rolled back).
    """
    with transaction.atomic():
        order = Order.objects.create(item=request.POST.get("item", "book"))
        transaction.on_commit(
            lambda: confirm_order.apply_async((order.pk,), countdown=CONFIRM_AFTER)
        )
    return JsonResponse({"order": order.pk}, status=201)
