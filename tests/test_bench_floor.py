"""The benchmark's floors store what squad_memory stores and the contract floor keeps
agent-squad's contract: gapless sequence numbers, the role rule, the conversation returned."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from bench.systems import WINDOW, ContractFloor, DjangoFloor, text_of
from squad_memory.models import Message, Slot

pytestmark = pytest.mark.django_db


def test_the_contract_floor_bumps_the_counter_skips_a_repeated_role_and_returns_the_rows() -> None:
    floor, slot = ContractFloor(), ("u", "s", "floor")
    async_to_sync(floor.prefill)(slot, 50)
    returned = floor.append(slot, 50)  # a user message after 25 pairs
    assert returned[-1] == {
        "role": "user",
        "content": [{"text": text_of(50)}],
        "citations": None,
        "timestamp": returned[-1]["timestamp"],
    }
    assert len(returned) == WINDOW
    assert floor.append(slot, 52)[-1]["content"] == [{"text": text_of(50)}]  # same role: skipped
    assert floor.append(slot, 51)[-1]["content"] == [{"text": text_of(51)}]
    row = Slot.objects.for_key(*slot).get()
    assert (row.last_seq, row.last_role) == (52, "assistant")
    seqs = list(Message.objects.filter(slot=row).values_list("seq", flat=True))
    assert seqs == list(range(1, 53))
    assert async_to_sync(floor.fetch)(slot) == floor.append(slot, 51)  # skipped again


def test_django_s_floor_inserts_the_same_row_values_as_squad_memory() -> None:
    floor, slot = DjangoFloor(), ("u", "s", "django-floor")
    async_to_sync(floor.prefill)(slot, 3)
    async_to_sync(floor.save)(slot, 3)
    got = Message.objects.filter(slot__agent_id="django-floor").order_by("seq").last()
    assert got is not None and (got.seq, got.role, got.text) == (4, "assistant", text_of(3))
    assert got.content == [{"text": text_of(3)}] and got.tokens > 0
    assert async_to_sync(floor.fetch)(slot)[-1]["content"] == [{"text": text_of(3)}]
