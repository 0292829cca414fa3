"""A real agent-squad orchestrator routes a long conversation between two agents
through SummarizingChatStorage(DjangoChatStorage(), ...)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from agent_squad.agents import Agent, AgentOptions
from agent_squad.classifiers import Classifier, ClassifierResult
from agent_squad.orchestrator import AgentSquad
from agent_squad.types import ConversationMessage

from squad_memory.models import Compression, Message
from squad_memory.operations import transfer
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from tests import summarizers

# Transactional: an inline compression runs on commit (transaction.on_commit), as in a
# project's autocommit code; a rolled-back test would never run it.
pytestmark = pytest.mark.django_db(transaction=True)


class EchoAgent(Agent):
    """An offline agent that records the history it was given."""

    def __init__(self, name: str) -> None:
        super().__init__(AgentOptions(name=name, description=f"{name} answers offline."))
        self.histories: list[list[str]] = []

    async def process_request(
        self,
        input_text: str,
        user_id: str,
        session_id: str,
        chat_history: list[ConversationMessage],
        additional_params: Any = None,
    ) -> ConversationMessage:
        self.histories.append([m.content[0]["text"] for m in chat_history])
        return ConversationMessage("assistant", [{"text": f"{self.id} answers {input_text}"}])


class KeywordClassifier(Classifier):
    """Routes travel words to the travel agent, the rest to tech; reads the merged history."""

    def __init__(self, tech: Agent, travel: Agent) -> None:
        super().__init__()
        self.tech, self.travel = tech, travel
        self.history_lengths: list[int] = []

    async def process_request(
        self, input_text: str, chat_history: list[ConversationMessage]
    ) -> ClassifierResult:
        self.history_lengths.append(len(chat_history))
        agent = self.travel if "flight" in input_text else self.tech
        return ClassifierResult(selected_agent=agent, confidence=1.0)


def test_orchestrator_sees_compressed_buffers_and_raw_history_is_whole() -> None:
    tech, travel = EchoAgent("Tech Agent"), EchoAgent("Travel Agent")
    classifier = KeywordClassifier(tech, travel)
    storage = SummarizingChatStorage(
        DjangoChatStorage(), summarizers.fold, trigger_at=5, keep_last=2
    )
    squad = AgentSquad(storage=storage, classifier=classifier, options={"LOG_EXECUTIONS": False})
    squad.add_agent(tech)
    squad.add_agent(travel)
    questions = [
        f"flight question {i}" if i % 3 == 0 else f"laptop question {i}" for i in range(66)
    ]

    async def talk() -> list[Any]:
        return [await squad.route_request(q, "user-1", "session-1") for q in questions]

    responses = asyncio.run(talk())
    assert all(r.metadata.agent_id in {tech.id, travel.id} for r in responses)
    for agent in (tech, travel):
        assert any(h and h[0].startswith("S(") for h in agent.histories), agent.id
        assert max(len(h) for h in agent.histories) <= 2 * 5 + 1
    merged = asyncio.run(storage.fetch_all_chats("user-1", "session-1"))
    assert len(merged) == 2 * len(questions) == Message.objects.count()
    assert [m.content[0]["text"] for m in merged[0::2]] == questions
    assert merged[1].content[0]["text"] == f"[{travel.id}] {travel.id} answers {questions[0]}"
    assert classifier.history_lengths[-1] == 2 * len(questions) - 2
    assert Compression.objects.filter(outcome="applied").count() >= 10


def talk_to_one_agent(turns: int, session: str, **options: Any) -> list[ConversationMessage]:
    """``turns`` turns through a real AgentSquad with one agent; then ``fetch_all_chats``."""
    agent = EchoAgent("Tech Agent")
    storage = SummarizingChatStorage(
        DjangoChatStorage(), summarizers.fold, trigger_at=5, keep_last=2
    )
    squad = AgentSquad(
        storage=storage,
        classifier=KeywordClassifier(agent, agent),
        options={"LOG_EXECUTIONS": False, **options},
    )
    squad.add_agent(agent)

    async def talk() -> list[ConversationMessage]:
        for i in range(turns):
            await squad.route_request(f"laptop question {i}", "user-1", session)
        return await storage.fetch_all_chats("user-1", session)

    return asyncio.run(talk())


def test_agent_squad_keeps_max_message_pairs_per_agent_in_fetch_all_chats() -> None:
    # What the README says: AgentSquad saves with MAX_MESSAGE_PAIRS_PER_AGENT (100, counted
    # in messages) as max_history_size, so fetch_all_chats shows the newest 100 of a slot.
    merged = talk_to_one_agent(60, "default")
    assert len(merged) == 100 and merged[0].content[0]["text"] == "laptop question 10"
    stored = Message.objects.filter(slot__session_id="default")
    assert (
        stored.count() == 120 and stored.trimmed().count() == 20 == 120 - stored.visible().count()
    )
    assert stored.order_by("seq").first().is_trimmed  # type: ignore[union-attr]
    out = io.StringIO()
    assert transfer.export(out, session_id="default") == 120  # the export has them all
    # With no limit, fetch_all_chats is the whole raw history.
    whole = talk_to_one_agent(60, "whole", MAX_MESSAGE_PAIRS_PER_AGENT=None)
    assert len(whole) == 120 and whole[0].content[0]["text"] == "laptop question 0"
    assert not Message.objects.filter(slot__session_id="whole").trimmed().exists()
