from django.db import models


class Order(models.Model):
    """An order; ``confirmed_at`` is set by the delayed confirmation task."""

    item = models.CharField(max_length=100)
    placed_at = models.DateTimeField(auto_now_add=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)
