"""The conversation every system stores: deterministic user and assistant messages."""

from __future__ import annotations

import time

from agent_squad.types import ConversationMessage

USER_FILLER = "Could you check the order status and the delivery address for me, please?"
ANSWER_FILLER = (
    "Your order is packed and leaves the warehouse tomorrow morning; the delivery address "
    "on file is the one you confirmed last week, and the courier will text you a time slot."
)


def user_text(i: int) -> str:
    return f"Question {i}. {USER_FILLER}"


def answer_text(i: int) -> str:
    return f"Answer {i}. {ANSWER_FILLER}"


def role_of(index: int) -> str:
    """Messages alternate user, assistant, starting with user."""
    return "user" if index % 2 == 0 else "assistant"


def text_of(index: int) -> str:
    """Text of the ``index``-th message of a pre-filled history (0-based)."""
    return user_text(index // 2) if index % 2 == 0 else answer_text(index // 2)


def user(i: int) -> ConversationMessage:
    return ConversationMessage(role="user", content=[{"text": user_text(i)}])


def answer(i: int) -> ConversationMessage:
    return ConversationMessage(role="assistant", content=[{"text": answer_text(i)}])


def history(n: int) -> list[ConversationMessage]:
    return [ConversationMessage(role=role_of(k), content=[{"text": text_of(k)}]) for k in range(n)]


def stamp() -> int:
    """Milliseconds since the epoch, as stored in a message row."""
    return int(time.time() * 1000)
