"""The benchmark's floor stores what squad_memory stores."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from bench.systems import DjangoFloor, text_of
from squad_memory.models import Message

pytestmark = pytest.mark.django_db


def test_django_s_floor_inserts_the_same_row_values_as_squad_memory() -> None:
    floor, slot = DjangoFloor(), ("u", "s", "django-floor")
    async_to_sync(floor.prefill)(slot, 3)
    async_to_sync(floor.save)(slot, 3)
    got = Message.objects.filter(slot__agent_id="django-floor").order_by("seq").last()
    assert got is not None and (got.seq, got.role, got.text) == (4, "assistant", text_of(3))
    assert got.content == [{"text": text_of(3)}] and got.tokens > 0
    assert async_to_sync(floor.fetch)(slot)[-1]["content"] == [{"text": text_of(3)}]
