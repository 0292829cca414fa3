"""A JSON renderer that cannot fail on text a client sent back to it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.renderers import JSONRenderer


class SafeJSONRenderer(JSONRenderer):
    """UTF-8 JSON; falls back to ASCII escapes when a string holds a lone surrogate.

    Error messages may quote what a client sent (``"\\ud800" is not a valid
    choice``); such a string cannot be encoded as UTF-8, but ``\\ud800`` is valid JSON.
    """

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        try:
            return bytes(super().render(data, accepted_media_type, renderer_context))
        except UnicodeEncodeError:
            return bytes(_AsciiJSONRenderer().render(data, accepted_media_type, renderer_context))


class _AsciiJSONRenderer(JSONRenderer):
    ensure_ascii = True
