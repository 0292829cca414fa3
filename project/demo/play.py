"""Plays the demo conversation through a real ``AgentSquad`` into the configured storage."""

from __future__ import annotations

import asyncio
import json
import secrets
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_squad.orchestrator import AgentSquad
from agent_squad.storage import ChatStorage
from agent_squad.types import AgentSquadConfig
from django.contrib.auth import get_user_model

import squad_memory
from project.demo.agents import KeywordClassifier, ScriptedAgent
from squad_memory.models import Compression, Message, Outcome, Slot

_ALPHABET = string.ascii_letters + string.digits
FIXTURE = Path(__file__).parent / "fixtures" / "conversation.json"


def load(path: Path = FIXTURE) -> dict[str, Any]:
    with open(path, encoding="utf-8") as stream:
        data: dict[str, Any] = json.load(stream)
    return data


def build(data: dict[str, Any], storage: ChatStorage | None = None) -> AgentSquad:
    """The orchestrator: two scripted agents, the keyword classifier, and ``storage``
    (squad_memory's, as ``settings.SQUAD_MEMORY`` describes it, by default)."""
    keywords, agents = {}, []
    for name, spec in data["agents"].items():
        script = {t["user"]: t["reply"] for t in data["turns"]}
        agent = ScriptedAgent(name, spec["description"], script)
        keywords[agent.id] = spec["keywords"]
        agents.append(agent)
    squad = AgentSquad(
        options=AgentSquadConfig(USE_DEFAULT_AGENT_IF_NONE_IDENTIFIED=True),
        storage=storage or squad_memory.get_storage(),
        classifier=KeywordClassifier(keywords),
        default_agent=agents[0],
    )
    for agent in agents:
        squad.add_agent(agent)
    return squad


@dataclass
class Turn:
    user: str
    agent: str | None
    reply: str


async def _play(squad: AgentSquad, data: dict[str, Any], session_id: str) -> list[Turn]:
    turns = []
    for turn in data["turns"]:
        response = await squad.route_request(turn["user"], data["user_id"], session_id)
        agent = response.metadata.agent_id if response.metadata else None
        text = response.output.content[0]["text"] if response.output.content else ""
        turns.append(Turn(turn["user"], agent, text))
    return turns


def play(data: dict[str, Any], session_id: str) -> list[Turn]:
    """Route every user turn of the script through the orchestrator; return what happened."""
    return asyncio.run(_play(build(data), data, session_id))


def session_exists(user_id: str, session_id: str) -> bool:
    return Message.objects.filter(slot__user_id=user_id, slot__session_id=session_id).exists()


def slot_report(user_id: str, session_id: str) -> list[str]:
    lines = []
    for slot in Slot.objects.filter(user_id=user_id, session_id=session_id).order_by("agent_id"):
        lines.append(
            f"  {slot.agent_id}: {slot.message_count} raw messages, buffer of "
            f"{slot.buffer_length} ({slot.state}), "
            f"{slot.compressions.count()} compression(s)"
        )
    return lines


#: What a scripted reply ends with when its agent was given a summary (agents.py).
GIVEN_A_SUMMARY = "incl. a summary)"


def first_summarized_turn(turns: list[Turn]) -> tuple[int, Turn] | None:
    """The first turn (numbered from 1) whose agent was given a summary, if any."""
    return next(((n, t) for n, t in enumerate(turns, 1) if t.reply.endswith(GIVEN_A_SUMMARY)), None)


def first_compression(user_id: str, session_id: str) -> Compression | None:
    """The session's first applied compression, if one has finished."""
    applied = Compression.objects.filter(
        slot__user_id=user_id, slot__session_id=session_id, outcome=Outcome.APPLIED
    )
    return applied.select_related("slot").order_by("finished_at", "id").first()


def slot_to_watch(user_id: str, session_id: str) -> Slot | None:
    """The slot a compression is queued for, else the one with the longest buffer."""
    slots = list(Slot.objects.filter(user_id=user_id, session_id=session_id))
    return max(slots, key=lambda s: (s.pending_since is not None, s.buffer_length), default=None)


def last_agent(user_id: str, session_id: str) -> str:
    """The agent of the session's most recently active slot."""
    slots = Slot.objects.filter(user_id=user_id, session_id=session_id)
    return str(slots.order_by("-updated_at").values_list("agent_id", flat=True)[0])


def admin(username: str) -> Any:
    return get_user_model().objects.get(username=username)


def ensure_admin(username: str, reset: bool) -> tuple[str, str | None]:
    """Create the admin user with a generated password; return (status, password or None)."""
    users = get_user_model()
    user = users.objects.filter(username=username).first()
    if user is not None and not reset:
        return "exists", None
    password = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    if user is None:
        users.objects.create_superuser(username=username, email="", password=password)
        return "created", password
    user.set_password(password)
    user.is_staff = user.is_superuser = user.is_active = True
    user.save()
    return "reset", password
