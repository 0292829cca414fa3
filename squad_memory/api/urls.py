"""URLs of the API: ``path("api/", include("squad_memory.api.urls"))``, after any other
route under the same prefix (its last route answers every other path with a JSON 404)."""

from __future__ import annotations

from django.urls import include, path, re_path
from rest_framework.routers import SimpleRouter

from squad_memory.api import docs, errors, views

app_name = "squad_memory_api"

router = SimpleRouter(trailing_slash=True)
router.register("slots", views.SlotViewSet, basename="slot")

#: Any session id, newlines included, so the view answers a bad one with its JSON 400.
SESSION_ID = r"(?P<session_id>(?s:.+))"

urlpatterns = [
    path("", views.RootView.as_view(), name="root"),
    path("sessions/", views.SessionListView.as_view(), name="session-list"),
    re_path(
        rf"^sessions/{SESSION_ID}/history/$",
        views.SessionHistoryView.as_view(),
        name="session-history",
    ),
    re_path(rf"^sessions/{SESSION_ID}/$", views.SessionView.as_view(), name="session"),
    path("search/", views.SearchView.as_view(), name="search"),
    path("schema/", docs.SchemaView.as_view(), name="schema"),
    path("docs/", docs.SwaggerView.as_view(url_name="squad_memory_api:schema"), name="docs"),
    path("redoc/", docs.RedocView.as_view(url_name="squad_memory_api:schema"), name="redoc"),
    path("redoc/redoc.standalone.js", docs.redoc_bundle, name="redoc-bundle"),
    path("", include(router.urls)),
    re_path(r"^(?P<path>.*)$", errors.not_found),
]
