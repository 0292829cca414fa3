"""A property-based stateful test: random saves, batch saves, same-role repeats,
fetches, summarizer failures and fresh wrapper instances, against a small
reference model of the described semantics."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_squad.types import ConversationMessage
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from squad_memory.models import Message, Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from tests import summarizers
from tests.conftest import buffer_of

pytestmark = pytest.mark.prepared

TRIGGER_AT, KEEP_LAST = 3, 1
roles = st.sampled_from(["user", "assistant"])
sizes = st.one_of(st.none(), st.integers(min_value=0, max_value=12))


def pairs(messages: list[ConversationMessage]) -> list[tuple[str, str]]:
    return [(m.role, m.content[0]["text"]) for m in messages]


def trim(messages: list[Any], size: int | None) -> list[Any]:
    keep = 0 if size is None else size - size % 2
    return messages[-keep:] if keep else messages


class Model:
    """The described semantics, in plain lists."""

    def __init__(self) -> None:
        self.raw: list[ConversationMessage] = []
        self.visible_from = 0
        self.buffer: list[ConversationMessage] | None = None
        self.prefix = 0  # how much of the buffer is the last compression's output

    def compress(self) -> None:
        assert self.buffer is not None
        if len(self.buffer) > 2 * TRIGGER_AT and not summarizers.FLAKY["fail"]:
            self.buffer = summarizers.fold(self.buffer, KEEP_LAST)
            self.prefix = len(self.buffer)

    def limited(self) -> list[ConversationMessage]:
        """The hard limit (MAX_BUFFER_PAIRS, by default 3 x TRIGGER_AT): the prefix, then
        the newest messages, starting with the role that follows the prefix."""
        assert self.buffer is not None
        prefix, tail = self.buffer[: self.prefix], self.buffer[self.prefix :]
        if len(tail) > 2 * 3 * TRIGGER_AT:
            tail = tail[-2 * 3 * TRIGGER_AT :]
            if tail[0].role == (prefix[-1].role if prefix else "assistant"):
                tail = tail[1:]
        return prefix + tail

    def save(self, messages: list[ConversationMessage], single: bool, size: int | None) -> None:
        if single and self.raw and self.raw[-1].role == messages[0].role:
            return
        if not messages:
            return
        self.raw += messages
        keep = 0 if size is None else size - size % 2
        if keep:
            self.visible_from = max(self.visible_from, len(self.raw) - keep)
        if self.buffer is not None:
            self.buffer += messages
            self.compress()

    def fetch(self, size: int | None) -> list[ConversationMessage]:
        if self.buffer is None:
            visible = self.raw[self.visible_from :]
            if len(self.raw) <= 2 * TRIGGER_AT:  # activation judges the whole history
                return trim(visible, size)
            self.buffer = list(visible)
            self.compress()
        return trim(self.limited(), size)


class StorageMachine(RuleBasedStateMachine):
    #: Drive the async ChatStorage methods instead of their sync twins.
    use_async = False

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop() if self.use_async else None
        Message.objects.all().delete()
        Slot.objects.all().delete()
        summarizers.FLAKY["fail"] = False
        self.model = Model()
        self.counter = 0
        self.store = self.new_store()

    def new_store(self) -> SummarizingChatStorage:
        return SummarizingChatStorage(DjangoChatStorage(), summarizers.flaky, TRIGGER_AT, KEEP_LAST)

    def message(self, role: str) -> ConversationMessage:
        self.counter += 1
        return ConversationMessage(role, [{"text": f"m{self.counter}"}])

    def call(self, method: str, *args: Any) -> Any:
        if self.loop is None:
            return getattr(self.store, f"{method}_sync")("u", "s", "a", *args)
        return self.loop.run_until_complete(getattr(self.store, method)("u", "s", "a", *args))

    @rule(role=roles, size=sizes)
    def save_one(self, role: str, size: int | None) -> None:
        message = self.message(role)
        self.call("save_chat_message", message, size)
        self.model.save([message], True, size)

    @rule(role=roles, size=sizes)
    def repeat_last_role(self, role: str, size: int | None) -> None:
        last = self.model.raw[-1].role if self.model.raw else role
        self.save_one(last, size)

    @rule(batch=st.lists(roles, max_size=5), size=sizes)
    def save_batch(self, batch: list[str], size: int | None) -> None:
        messages = [self.message(r) for r in batch]
        self.call("save_chat_messages", messages, size)
        self.model.save(messages, False, size)

    @rule(size=sizes)
    def fetch(self, size: int | None) -> None:
        assert pairs(self.call("fetch_chat", size)) == pairs(self.model.fetch(size))

    @rule(fail=st.booleans())
    def summarizer_health(self, fail: bool) -> None:
        summarizers.FLAKY["fail"] = fail

    @rule()
    def fresh_instance(self) -> None:
        self.store = self.new_store()

    @invariant()
    def raw_history_is_every_accepted_message_in_order(self) -> None:
        stored = Message.objects.filter(slot__agent_id="a").order_by("seq")
        assert [(m.role, m.content[0]["text"]) for m in stored] == pairs(self.model.raw)

    @invariant()
    def buffer_matches_the_model(self) -> None:
        slot = Slot.objects.filter(agent_id="a").first()
        if self.model.buffer is None:
            assert slot is None or not slot.active
        else:
            assert slot is not None and slot.active
            assert [(m["role"], m["content"][0]["text"]) for m in buffer_of(slot)] == pairs(
                self.model.buffer
            )

    def teardown(self) -> None:
        summarizers.FLAKY["fail"] = False
        if self.loop is not None:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()


class AsyncStorageMachine(StorageMachine):
    use_async = True


@pytest.mark.django_db(transaction=True)  # the saves compress on commit
@pytest.mark.parametrize("machine", [StorageMachine, AsyncStorageMachine], ids=["sync", "async"])
def test_storage_matches_the_reference_model(machine: type[StorageMachine]) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
