"""The API's documentation: the OpenAPI pieces the views share, and the pages ``schema/``,
``docs/`` (Swagger UI) and ``redoc/`` (ReDoc), versioned ``squad_memory.__version__``, served
from local files when ``drf_spectacular_sidecar`` is installed (asking no other host). They
need ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] = "drf_spectacular.openapi.AutoSchema"``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources
from typing import Any

from django.apps import apps
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.templatetags.static import static
from django.urls import reverse
from django.utils.cache import patch_cache_control
from drf_spectacular.authentication import TokenScheme
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.settings import patched_settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request
from rest_framework.response import Response

import squad_memory
from squad_memory.api import errors
from squad_memory.api.serializers import (
    ID_SCHEMA,
    ErrorSerializer,
    PostMessagesSerializer,
    PostResultSerializer,
    ServerErrorSerializer,
)
from squad_memory.conf import app_settings
from squad_memory.operations.idempotency import MAX_KEY_LENGTH

SLOT_ID = OpenApiParameter(
    "id", {"type": "integer", "minimum": 1}, OpenApiParameter.PATH, description="The slot's id."
)
SESSION_ID = OpenApiParameter(
    "session_id", ID_SCHEMA, OpenApiParameter.PATH, description="The session id (%2F for a slash)."
)
#: Printable ASCII, as HTTP header values are (a UUID is a good key).
KEY_PATTERN = f"^[\\x20-\\x7e]{{1,{MAX_KEY_LENGTH}}}$"
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH, "pattern": KEY_PATTERN},
    OpenApiParameter.HEADER,
    description="Optional. A retry with the same key and body returns the first answer and "
    "stores nothing; the same key with another body is a 422. Use a new UUID per request.",
)


def _message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": [{"text": text}]}


#: Valid bodies of a post, for the docs pages' "Try it out".
POST_EXAMPLES = [
    OpenApiExample(
        "One message",
        value={"session_id": "s1", "agent_id": "tech", "message": _message("user", "Hello")},
        request_only=True,
    ),
    OpenApiExample(
        "A batch",
        value={
            "session_id": "s1",
            "agent_id": "tech",
            "messages": [_message("user", "Hello"), _message("assistant", "Hi, how can I help?")],
        },
        request_only=True,
    ),
]


def _error(description: str, serializer: Any = ErrorSerializer) -> OpenApiResponse:
    return OpenApiResponse(serializer, description=description)


ERRORS = {
    400: _error(
        "Invalid input: each bad field (or non_field_errors) with its errors; malformed JSON "
        'gives {"detail": ...}.',
        OpenApiTypes.OBJECT,
    ),
    401: _error("Not authenticated."),
    403: _error("Authenticated, but without the permission it names."),
    404: _error("No such slot, not one of yours, or an invalid cursor."),
    413: _error("The request body is too large."),
    415: _error("The body is not application/json."),
    422: _error("The Idempotency-Key was used for a different request."),
    429: _error("Too many requests; retry after Retry-After seconds."),
    502: _error(
        "The summarizer failed; anything the request stored stays stored. Its error is shown "
        "to staff with view_compression; others get an error_id to quote.",
        ServerErrorSerializer,
    ),
    503: _error(
        "The database or the broker did not answer, or a search ran out of time; nothing "
        "was changed: retry after Retry-After seconds.",
        ServerErrorSerializer,
    ),
}


#: The answer to a single message skipped by the role rule.
SKIPPED = OpenApiResponse(
    PostResultSerializer, description="Nothing stored: the message repeated the last role."
)


def responses(success: dict[int, Any], *codes: int) -> dict[int, Any]:
    """``success`` plus the errors ``codes`` and those of any request: 401, 403 (no
    permission, or no identity), 429 and 503 (throttled, or a database outage)."""
    if 400 in codes and 413 in codes:
        codes += (415,)
    return {**success, **{code: ERRORS[code] for code in (*codes, 401, 403, 429, 503)}}


def docs_settings() -> dict[str, Any]:
    """``SPECTACULAR_SETTINGS`` for the docs pages: this version, local files when the
    sidecar is installed, and a title unless the project set one."""
    patches: dict[str, Any] = {"VERSION": squad_memory.__version__}
    configured = getattr(settings, "SPECTACULAR_SETTINGS", {})
    if "TITLE" not in configured:
        patches["TITLE"] = "squad_memory API"
        patches["DESCRIPTION"] = "Conversations of agent-squad apps: slots, raw messages, buffers."
    if apps.is_installed("drf_spectacular_sidecar"):
        patches.update(SWAGGER_UI_DIST="SIDECAR", SWAGGER_UI_FAVICON_HREF="SIDECAR")
        patches.update(REDOC_DIST="SIDECAR")
    return patches


NO_NUL = {"pattern": "^[^\\u0000]*$"}
#: A JSON value the storage can hold: strings without NUL, at any depth (the server also
#: refuses lone surrogates, non-finite numbers and nesting past 32 levels).
STORABLE = ResolvedComponent(  # type: ignore[no-untyped-call]
    name="StorableJSON",
    type=ResolvedComponent.SCHEMA,
    object="StorableJSON",
    schema={
        "nullable": True,
        "anyOf": [
            {"type": "string", **NO_NUL},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "array", "items": {"$ref": "#/components/schemas/StorableJSON"}},
            {
                "type": "object",
                "patternProperties": {
                    NO_NUL["pattern"]: {"$ref": "#/components/schemas/StorableJSON"}
                },
                "additionalProperties": False,
            },
        ],
    },
)


class StorableSchema(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """A message's content (a non-empty list of non-empty objects) and citations, as
    storable JSON."""

    target_class = "squad_memory.api.serializers.ContentField"
    block = {
        "type": "object",
        "minProperties": 1,
        "patternProperties": {NO_NUL["pattern"]: STORABLE.ref},
        "additionalProperties": False,
        "example": {"text": "Hello"},
    }

    def map_serializer_field(self, auto_schema: Any, direction: str) -> Any:
        auto_schema.registry.register_on_missing(STORABLE)
        return {"type": "array", "minItems": 1, "items": self.block}


class CitationsSchema(StorableSchema):  # type: ignore[no-untyped-call]
    target_class = "squad_memory.api.serializers.CitationsField"

    def map_serializer_field(self, auto_schema: Any, direction: str) -> Any:
        auto_schema.registry.register_on_missing(STORABLE)
        return {"type": "array", "nullable": True, "items": STORABLE.ref}


class StrictSchema(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """A request refusing unknown fields says so (``additionalProperties: false``); the
    post's body has exactly one of ``message`` and ``messages`` (a rule OpenAPI states as
    ``oneOf``, which the fields cannot say), a batch 1 to ``MAX_BATCH_SIZE`` messages."""

    target_class = "squad_memory.api.serializers.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: str) -> Any:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction != "request":
            return schema
        schema["additionalProperties"] = False
        if isinstance(self.target, PostMessagesSerializer):
            schema["oneOf"] = [{"required": ["message"]}, {"required": ["messages"]}]
            batch = schema["properties"]["messages"]
            batch.update(minItems=1, maxItems=app_settings.max_batch_size)
        return schema


class TokenKeyScheme(TokenScheme):  # type: ignore[no-untyped-call]
    """The Authorize box of the docs pages says what to type: the keyword, a space, the key."""

    priority = 0

    def get_security_definition(self, auto_schema: Any) -> Any:
        scheme = super().get_security_definition(auto_schema)  # type: ignore[no-untyped-call]
        keyword = self.target.keyword
        scheme["description"] = f"Type `{keyword} <key>`: the word {keyword}, a space, your key."
        return scheme


class _Documented:
    """A docs view served with :func:`docs_settings` (and its own ``extra_headers``); public,
    so it checks no credentials (a wrong token is no answer to learn from)."""

    authentication_classes: Sequence[type[BaseAuthentication]] = []
    patches: dict[str, Any] = {}
    extra_headers: dict[str, str] = {}

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        with patched_settings({**self.patches, **docs_settings()}):
            response: Response = super().get(request, *args, **kwargs)  # type: ignore[misc]
        for name, value in self.extra_headers.items():
            response[name] = value
        return response


class SchemaView(_Documented, SpectacularAPIView):
    patches = {"COMPONENT_SPLIT_REQUEST": True}


class SwaggerView(_Documented, SpectacularSwaggerView):
    pass


class RedocView(_Documented, SpectacularRedocView):
    """ReDoc without its web fonts (a template of ours), its side menu's logo served from
    here (:func:`redoc_bundle`); the page's Content-Security-Policy lets images come from
    here only."""

    template_name = "squad_memory/api/redoc.html"
    extra_headers = {"Content-Security-Policy": "img-src 'self' data:"}

    @staticmethod
    def _redoc_standalone() -> str:
        if not apps.is_installed("drf_spectacular_sidecar"):
            return str(SpectacularRedocView._redoc_standalone())  # type: ignore[no-untyped-call]
        return reverse("squad_memory_api:redoc-bundle")


#: The sidecar's ReDoc bundle, and what it asks another host for whatever its options: the
#: logo of its side menu's "API docs by Redocly" link.
REDOC_BUNDLE = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
REDOC_CDN_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
REDOC_LOGO = "squad_memory/api/redoc-logo.svg"


def redoc_bundle(request: HttpRequest) -> HttpResponse:
    """``redoc/redoc.standalone.js``: the sidecar's ReDoc with the logo it would fetch from
    its CDN served from this server's static files, so the page asks no other host."""
    if not apps.is_installed("drf_spectacular_sidecar"):  # the page loads ReDoc's CDN
        return errors.not_found(request)
    response = HttpResponse(
        _local_bundle(static(REDOC_LOGO), static(f"{REDOC_BUNDLE}.map")),
        content_type="text/javascript; charset=utf-8",
    )
    patch_cache_control(response, public=True, max_age=3600)
    return response


@functools.cache
def _local_bundle(logo: str, source_map: str) -> str:
    """The bundle (1 MB, read once a process) with the logo's and the source map's URLs."""
    path = resources.files("drf_spectacular_sidecar") / "static" / REDOC_BUNDLE
    text = path.read_text(encoding="utf-8").replace(REDOC_CDN_LOGO, logo)
    return text.replace(
        "sourceMappingURL=redoc.standalone.js.map", f"sourceMappingURL={source_map}"
    )
