"""URLs of the API. Mount with ``path("api/", include("squad_memory.api.urls"))``."""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from squad_memory.api.views import SessionHistoryView, SessionView, SlotViewSet

app_name = "squad_memory_api"

router = SimpleRouter(trailing_slash=True)
router.register("slots", SlotViewSet, basename="slot")

urlpatterns = [
    path(
        "sessions/<path:session_id>/history/",
        SessionHistoryView.as_view(),
        name="session-history",
    ),
    path("sessions/<path:session_id>/", SessionView.as_view(), name="session"),
    path("", include(router.urls)),
]
