"""URLs of the API. Mount with ``path("api/", include("squad_memory.api.urls"))``."""

from __future__ import annotations

from django.urls import include, path, re_path
from rest_framework.routers import SimpleRouter

from squad_memory.api.data_views import SearchView, SessionView
from squad_memory.api.views import SessionHistoryView, SlotViewSet

app_name = "squad_memory_api"

router = SimpleRouter(trailing_slash=True)
router.register("slots", SlotViewSet, basename="slot")

#: Any session id, newlines included, so the view answers a bad one with its JSON 400.
SESSION_ID = r"(?P<session_id>(?s:.+))"

urlpatterns = [
    re_path(
        rf"^sessions/{SESSION_ID}/history/$",
        SessionHistoryView.as_view(),
        name="session-history",
    ),
    re_path(rf"^sessions/{SESSION_ID}/$", SessionView.as_view(), name="session"),
    path("search/", SearchView.as_view(), name="search"),
    path("", include(router.urls)),
]
