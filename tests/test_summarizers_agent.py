"""LLMSummarizer with an agent-squad Agent as its backend (an offline agent)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agent_squad.agents import Agent, AgentOptions
from agent_squad.types import ConversationMessage

from squad_memory.exceptions import SummarizerBackendError, SummarizerBadReply, SummarizerTimeout
from squad_memory.models import Compression
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from squad_memory.summarizers import LLMSummarizer, is_summary
from squad_memory.summarizers.base import make_summary
from tests.conftest import msg, texts


class NotesAgent(Agent):
    """Answers with the number of lines it was asked about; records every request."""

    def __init__(self, delay: float = 0.0, fail: bool = False, reply: Any = "default") -> None:
        super().__init__(AgentOptions(name="Notes Agent", description="Takes notes."))
        self.requests: list[dict[str, Any]] = []
        self.delay, self.fail, self.reply = delay, fail, reply

    async def process_request(
        self,
        input_text: str,
        user_id: str,
        session_id: str,
        chat_history: list[ConversationMessage],
        additional_params: Any = None,
    ) -> ConversationMessage:
        self.requests.append({"text": input_text, "history": chat_history, "user": user_id})
        await asyncio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("agent exploded")
        lines = input_text.count("\nuser: ") + input_text.count("\nassistant: ")
        text = f"Notes on {lines} messages." if self.reply == "default" else self.reply
        return ConversationMessage(role="assistant", content=[{"text": text}] if text else [])


def conversation(n: int) -> list[Any]:
    return [msg("user" if i % 2 == 0 else "assistant", f"line{i}") for i in range(n)]


def test_agent_backend_gets_previous_summary_and_new_messages_only() -> None:
    agent = NotesAgent()
    out = LLMSummarizer.agent(agent)([make_summary("The user is Ana."), *conversation(9)], 1)
    (request,) = agent.requests
    assert "The user is Ana." in request["text"]
    assert "line0" in request["text"] and "line6" in request["text"]
    assert "line7" not in request["text"]  # the verbatim tail is not sent
    assert request["history"] == [] and request["user"] == "squad_memory"
    assert texts(out) == ["[Summary] Notes on 7 messages.", "line7", "line8"]
    assert is_summary(out[0])


def test_agent_backend_timeout_and_errors() -> None:
    with pytest.raises(SummarizerTimeout, match="agent:notes-agent"):
        LLMSummarizer.agent(NotesAgent(delay=2), timeout=0.1)(conversation(10), 1)
    with pytest.raises(SummarizerBackendError, match="agent exploded"):
        LLMSummarizer.agent(NotesAgent(fail=True))(conversation(10), 1)
    with pytest.raises(SummarizerBadReply):
        LLMSummarizer.agent(NotesAgent(reply=""))(conversation(10), 1)


@pytest.fixture
def close_worker_connections() -> Iterator[None]:
    """Close the connection the async storage methods opened in their worker thread."""
    yield
    from asgiref.sync import sync_to_async
    from django.db import connections

    asyncio.run(sync_to_async(connections.close_all)())


@pytest.mark.django_db(transaction=True)  # compresses on commit, from async code
@pytest.mark.usefixtures("close_worker_connections")
def test_agent_summarizer_in_the_storage() -> None:
    agent = NotesAgent()
    storage = SummarizingChatStorage(DjangoChatStorage(), LLMSummarizer.agent(agent), 3, 1)
    for message in conversation(9):
        if message.role == "user":
            asyncio.run(storage.fetch_chat("u", "s", "a"))
        asyncio.run(storage.save_chat_message("u", "s", "a", message))
    buffer = asyncio.run(storage.fetch_chat("u", "s", "a"))
    assert is_summary(buffer[0]) and texts(buffer)[-1] == "line8"
    assert Compression.objects.filter(outcome="applied").exists()
    assert Compression.objects.first().summarizer.endswith("LLMSummarizer")  # type: ignore[union-attr]
