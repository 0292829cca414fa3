"""Views over a user's stored data as a whole: deleting a session, and search."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from squad_memory import search
from squad_memory.api import schema
from squad_memory.api.answers import query, user_id_param
from squad_memory.api.deletion import SessionDeleteMixin
from squad_memory.api.search import (
    SearchCursorPagination,
    SearchHitSerializer,
    SearchQuerySerializer,
)
from squad_memory.api.serializers import UserQuerySerializer, check_id
from squad_memory.api.views import ApiMixin, storage
from squad_memory.models import Message


class SessionView(SessionDeleteMixin, ApiMixin, APIView):
    """``DELETE /sessions/{session_id}/``: every slot of a session of one user."""

    @extend_schema(
        summary="Delete a session",
        description="Deletes every agent's slot of the session (the requesting user's, or, "
        "for staff with the delete permission, ?user_id='s) with its raw messages, summaries "
        "and compression log; other users' slots of the same session id stay.",
        parameters=[schema.SESSION_ID, UserQuerySerializer],
        request=None,
        responses=schema.errors({204: None}, 400, 401, 403, 404),
    )
    def delete(self, request: Request, session_id: str) -> Response:
        try:
            check_id(session_id)
        except ValidationError as exc:
            raise ValidationError({"session_id": exc.detail}) from exc
        given = query(UserQuerySerializer, request).get("user_id")
        return self.delete_session(request, session_id, given, storage().namespace)


class SearchView(ApiMixin, generics.GenericAPIView[Message]):
    """Full-text search over the raw messages of one user's conversations."""

    pagination_class = SearchCursorPagination
    serializer_class = SearchHitSerializer

    @extend_schema(
        summary="Search raw messages",
        description="The requesting user's raw messages matching ?q= (staff may pass "
        "?user_id=), newest first, cursor-paginated; each hit names its slot and seq and "
        "carries an HTML-escaped excerpt with the hits in <mark>.",
        parameters=[SearchQuerySerializer],
        responses=schema.errors({200: SearchHitSerializer(many=True)}, 400, 401, 403, 404),
    )
    def get(self, request: Request) -> Response:
        params = query(SearchQuerySerializer, request)
        user_id = user_id_param(request, params.get("user_id"))
        rows = (
            Message.objects.filter(slot__namespace=storage().namespace, slot__user_id=user_id)
            .select_related("slot")
            .only(*SearchHitSerializer.Meta.loads)
        )
        page = self.paginate_queryset(search.matching(rows, params["q"]))
        data = SearchHitSerializer(page, many=True, context={"q": params["q"]}).data
        return self.get_paginated_response(data)
