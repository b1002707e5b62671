"""The site's URLs: the shop's order view, the admin (its login is the site's), and the
celery-delayq dashboard at /delayq/, for staff only."""

from django.contrib import admin
from django.urls import include, path

from celery_delayq.contrib.django import dashboard_urls
from example_project.django_site.celery import app
from example_project.django_site.shop import views

urlpatterns = [
    path("orders/", views.place_order, name="place-order"),
    path("admin/", admin.site.urls),
    path("delayq/", include(dashboard_urls(app))),
]
