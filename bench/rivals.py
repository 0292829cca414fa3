"""The stores squad_memory is compared with: agent-squad's wrapper and LangChain's memory."""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from agent_squad.storage import InMemoryChatStorage
from agent_squad.storage import SummarizingChatStorage as SquadSummarizing
from agent_squad.types import TimestampedMessage

from bench import conversation, summarizer
from bench.base import ChatStorageSystem, SlotId, System


class AgentSquadInMemory(ChatStorageSystem):
    """agent-squad's ``SummarizingChatStorage`` over its ``InMemoryChatStorage``."""

    name = "agent-squad-inmemory"
    label = "agent-squad wrapper (InMemory)"
    database = "process memory"

    def __init__(self, slow: bool = False) -> None:
        func = summarizer.asummarize_slow if slow else summarizer.asummarize
        self.inner = self.make_inner()
        self.storage = SquadSummarizing(self.inner, func, 20, 2)

    def make_inner(self) -> Any:
        return InMemoryChatStorage()

    async def prefill(self, slot: SlotId, n: int) -> None:
        now = int(time.time() * 1000)
        self.inner.conversations["#".join(slot)] = [
            TimestampedMessage(role=m.role, content=m.content, timestamp=now)
            for m in conversation.history(n)
        ]
        await self.storage.fetch_chat(*slot)  # activates the buffer


class AgentSquadLibsql(AgentSquadInMemory):
    """agent-squad's ``SummarizingChatStorage`` over its ``SqlChatStorage`` (a libsql file)."""

    name = "agent-squad-libsql"
    label = "agent-squad wrapper (libsql)"
    database = "libsql file"

    def __init__(self, path: Path, slow: bool = False) -> None:
        self.path = path
        super().__init__(slow)

    def make_inner(self) -> Any:
        from agent_squad.storage import SqlChatStorage

        self.path.unlink(missing_ok=True)
        return SqlChatStorage(url=f"file:{self.path}")

    async def start(self) -> None:
        await self.inner.initialize()

    async def prefill(self, slot: SlotId, n: int) -> None:
        now = int(time.time() * 1000)
        rows = [
            (*slot, k, m.role, _json(m.content), now) for k, m in enumerate(conversation.history(n))
        ]
        with sqlite3.connect(self.path) as db:  # bulk insert beside the store's own connection
            db.executemany("INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        await self.storage.fetch_chat(*slot)

    async def close(self) -> None:
        await self.inner.close()


def _json(content: Any) -> str:
    return json.dumps(content)


class LangChainSummaryBuffer(System):
    """LangChain's ``ConversationSummaryBufferMemory`` over ``SQLChatMessageHistory`` (SQLite)."""

    name = "langchain-sql"
    label = "LangChain summary buffer (SQL)"
    database = "SQLite (SQLAlchemy)"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.unlink(missing_ok=True)
        self.memories: dict[SlotId, Any] = {}

    def memory(self, slot: SlotId) -> Any:
        if slot not in self.memories:
            self.memories[slot] = _summary_memory(f"sqlite:///{self.path}", "#".join(slot))
        return self.memories[slot]

    async def prefill(self, slot: SlotId, n: int) -> None:
        memory = self.memory(slot)
        memory.chat_memory.add_messages(
            [_lc_message(m.role, m.content[0]["text"]) for m in conversation.history(n)]
        )
        memory.prune()  # the first summary, as agent-squad's activation

    async def turn(self, slot: SlotId, i: int) -> dict[str, float]:
        """``save_context`` stores the user message and the answer at once, then prunes."""
        memory = self.memory(slot)
        start = time.perf_counter()
        memory.save_context(
            {"input": conversation.user_text(i)}, {"output": conversation.answer_text(i)}
        )
        saved = time.perf_counter()
        memory.load_memory_variables({})
        return {"save": saved - start, "fetch": time.perf_counter() - saved}

    async def fetch(self, slot: SlotId) -> Any:
        return self.memory(slot).load_memory_variables({})


def _lc_message(role: str, text: str) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage

    return HumanMessage(content=text) if role == "user" else AIMessage(content=text)


def _summary_memory(url: str, session_id: str) -> Any:
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from langchain_classic.memory import ConversationSummaryBufferMemory
    from langchain_community.chat_message_histories import SQLChatMessageHistory

    history = SQLChatMessageHistory(session_id=session_id, connection=url)
    llm = _fake_llm_class()(responses=[summarizer.summary_text("x" * 4000)])
    limit = _tokens(conversation.user_text(0)) * 20 + _tokens(conversation.answer_text(0)) * 20
    return ConversationSummaryBufferMemory(
        llm=llm, chat_memory=history, max_token_limit=limit, return_messages=True
    )


def _tokens(text: str) -> int:
    return len(text) // 4


@functools.lru_cache(maxsize=1)
def _fake_llm_class() -> Any:
    from langchain_core.language_models.fake import FakeListLLM

    class FakeSummaryLLM(FakeListLLM):
        """FakeListLLM that sleeps like the shared fake summarizer and counts tokens cheaply."""

        def _call(self, prompt: str, *args: Any, **kwargs: Any) -> str:
            time.sleep(summarizer.sleep_of(summarizer.FAST_ENV, 0.0))
            return summarizer.summary_text(prompt)

        def get_num_tokens(self, text: str) -> int:
            return _tokens(text)

        def get_num_tokens_from_messages(self, messages: list[Any], tools: Any = None) -> int:
            return sum(len(m.content) for m in messages) // 4

    return FakeSummaryLLM
