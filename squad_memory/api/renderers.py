"""A JSON renderer that cannot fail on text a client sent back to it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer


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


class JSONFirstBrowsableAPIRenderer(BrowsableAPIRenderer):
    """DRF's browsable API, for a browser that asks for ``text/html``.

    Listed after the JSON renderer, so a client that sends no ``Accept`` header, or
    ``*/*``, or ``application/json``, gets JSON; a browser logged in through the admin
    (a session) gets the HTML page, with forms for the endpoints it may post to.
    """
