"""A project that mounts the API without DRF's login pages (``rest_framework.urls``)."""

from django.urls import include, path

urlpatterns = [path("api/", include("squad_memory.api.urls"))]
