"""Offline agent-squad parts for the demo: scripted agents and a keyword classifier.

They are real subclasses of agent-squad's ``Agent`` and ``Classifier``, so the
demo runs the real ``AgentSquad`` orchestrator without any model or network.
"""

from __future__ import annotations

import re
from typing import Any

from agent_squad.agents import Agent, AgentOptions
from agent_squad.classifiers import Classifier, ClassifierResult
from agent_squad.types import ConversationMessage

from squad_memory.summarizers import is_summary

_AGENT_TAG = re.compile(r"^\[([\w-]+)\]")


class ScriptedAgent(Agent):
    """Answers from a script (question -> reply) and says how much context it was given."""

    def __init__(self, name: str, description: str, script: dict[str, str]) -> None:
        super().__init__(AgentOptions(name=name, description=description))
        self.script = script

    async def process_request(
        self,
        input_text: str,
        user_id: str,
        session_id: str,
        chat_history: list[ConversationMessage],
        additional_params: Any = None,
    ) -> ConversationMessage:
        reply = self.script.get(input_text, "Could you tell me a little more?")
        summary = " incl. a summary" if chat_history and is_summary(chat_history[0]) else ""
        note = f"(context: {len(chat_history)} messages{summary})"
        return ConversationMessage(role="assistant", content=[{"text": f"{reply} {note}"}])


class KeywordClassifier(Classifier):
    """Routes by keywords; a message without any stays with the previous agent."""

    def __init__(self, keywords: dict[str, list[str]]) -> None:
        super().__init__()
        self.keywords = {
            agent_id: [k.lower() for k in words] for agent_id, words in keywords.items()
        }

    async def process_request(
        self, input_text: str, chat_history: list[ConversationMessage]
    ) -> ClassifierResult:
        text = input_text.lower()
        scores = {a: sum(k in text for k in words) for a, words in self.keywords.items()}
        best = max(scores, key=lambda a: scores[a])
        if scores[best] == 0:
            best = _previous_agent(chat_history) or best
            return ClassifierResult(selected_agent=self.get_agent_by_id(best), confidence=0.5)
        return ClassifierResult(selected_agent=self.get_agent_by_id(best), confidence=0.9)


def _previous_agent(history: list[ConversationMessage]) -> str | None:
    for message in reversed(history):
        if message.role == "assistant" and message.content:
            match = _AGENT_TAG.match(str(message.content[0].get("text", "")))
            if match:
                return match.group(1)
    return None
