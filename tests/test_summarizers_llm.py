"""LLMSummarizer against a real OpenAI-compatible HTTP server on 127.0.0.1.

The server is a few lines of ``http.server`` in a thread; the real ``openai``
(and ``anthropic``) client talks real HTTP to it. Only the model's reply is
scripted.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import override_settings

from squad_memory.exceptions import (
    SummarizerBackendError,
    SummarizerBadReply,
    SummarizerRateLimited,
    SummarizerTimeout,
)
from squad_memory.models import Compression, Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage, get_storage
from squad_memory.summarizers import LLMSummarizer, is_summary
from squad_memory.summarizers.base import make_summary
from tests import summarizers
from tests.conftest import extra, msg, texts

extra("openai", "openai")  # the backends drive the real SDKs against a local fake
extra("anthropic", "anthropic")


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict -> JSON; str -> sent as is
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def completion(text: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "test-model",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def anthropic_message(text: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "test-model",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


class FakeLLM:
    """Scripted replies in order (the last one repeats); every request is recorded."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                fake.requests.append({"path": self.path, "json": json.loads(body or b"{}")})
                reply = fake.next_reply(self.path)
                time.sleep(reply.delay)
                data = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                try:
                    self.send_response(reply.status)
                    kind = "text/plain" if isinstance(reply.body, str) else "application/json"
                    self.send_header("content-type", kind)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(data.encode())))
                    self.end_headers()
                    self.wfile.write(data.encode())
                except OSError:
                    pass  # the client gave up (timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # A short poll interval: shutdown() returns at once instead of after half a second.
        serve = lambda: self.server.serve_forever(poll_interval=0.02)  # noqa: E731
        self.thread = threading.Thread(target=serve, daemon=True)

    def next_reply(self, path: str) -> Reply:
        if self.replies:
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        body = (
            anthropic_message("A summary.")
            if "messages" in path and "chat" not in path
            else (completion("A summary."))
        )
        return Reply(body=body)

    def prompts(self) -> list[str]:
        """The user prompt of every chat-completions request."""
        return [r["json"]["messages"][-1]["content"] for r in self.requests]


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    fake = FakeLLM()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def summarizer(fake: FakeLLM, **options: Any) -> LLMSummarizer:
    options.setdefault("timeout", 5.0)
    return LLMSummarizer.openai(
        "test-model", base_url=f"{fake.url}/v1", api_key="test-key", max_retries=0, **options
    )


def play(storage: SummarizingChatStorage, messages: list[Any]) -> None:
    """Save messages as the orchestrator does: fetch the agent's buffer, then save each."""
    for message in messages:
        if message.role == "user":
            storage.fetch_chat_sync("u", "s", "a")
        storage.save_chat_message_sync("u", "s", "a", message)


def conversation(n: int, tag: str = "m") -> list[Any]:
    return [msg("user" if i % 2 == 0 else "assistant", f"{tag}{i} text") for i in range(n)]


def test_request_holds_previous_summary_and_only_new_messages(llm: FakeLLM) -> None:
    llm.replies = [Reply(body=completion("The user likes green tea and plans Lisbon."))]
    history = [
        make_summary("The user likes green tea."),
        msg("assistant", "old-answer"),
        *conversation(8, "new"),
    ]
    out = summarizer(llm)(history, 2)
    (prompt,) = llm.prompts()
    assert "The user likes green tea." in prompt
    assert "old-answer" in prompt and "new0 text" in prompt and "new2 text" in prompt
    # The verbatim tail is not sent: the last two pairs plus one assistant message.
    assert "new3 text" not in prompt and "new7 text" not in prompt
    assert texts(out[1:]) == [f"new{i} text" for i in range(3, 8)]
    assert llm.requests[0]["json"]["model"] == "test-model"
    assert llm.requests[0]["path"] == "/v1/chat/completions"


def test_reply_becomes_the_marked_summary(llm: FakeLLM) -> None:
    llm.replies = [Reply(body=completion("  Bob ordered 3 blue shirts.  "))]
    out = summarizer(llm)(conversation(10), 1)
    assert out[0].role == "user" and is_summary(out[0])
    assert out[0].content == [{"text": "[Summary] Bob ordered 3 blue shirts."}]
    assert [m.role for m in out] == ["user", "assistant", "user", "assistant"]


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_a_second_compression_never_resends_folded_messages(llm: FakeLLM) -> None:
    llm.replies = [Reply(body=completion("first summary")), Reply(body=completion("second"))]
    storage = SummarizingChatStorage(
        DjangoChatStorage(), summarizer(llm), trigger_at=3, keep_last=1
    )
    sent = conversation(14, "turn")
    play(storage, sent)
    assert len(llm.requests) >= 2
    first, second = llm.prompts()[:2]
    folded_first = [t for t in texts(sent) if t in first]
    assert folded_first and "first summary" in second
    assert not any(t in second for t in folded_first)
    buffer = storage.fetch_chat_sync("u", "s", "a")
    assert is_summary(buffer[0]) and texts(buffer)[-1] == "turn13 text"


@pytest.mark.parametrize("style", ["bedrock", "anthropic"])
def test_tool_pair_at_the_cut_stays_whole(llm: FakeLLM, style: str) -> None:
    if style == "bedrock":
        use = {"toolUse": {"toolUseId": "t1", "name": "weather", "input": {"city": "Oslo"}}}
        result = {"toolResult": {"toolUseId": "t1", "content": [{"text": "4 C"}]}}
    else:
        use = {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}
        result = {"type": "tool_result", "tool_use_id": "t1", "content": "4 C"}
    history = [
        *conversation(6),
        msg("user", "weather in Oslo?"),
        type(msg("a", ""))(role="assistant", content=[use]),
        type(msg("a", ""))(role="user", content=[result]),
        msg("assistant", "It is 4 C."),
    ]
    out = summarizer(llm)(history, 1)  # a naive cut would fall between the use and the result
    kept = [block for m in out[1:] for block in m.content]
    assert use in kept and result in kept
    assert "[tool call" not in llm.prompts()[0] and "[tool result" not in llm.prompts()[0]
    assert out[1].role == "assistant"


def test_summary_size_is_capped(llm: FakeLLM) -> None:
    llm.replies = [Reply(body=completion("word " * 5000))]
    out = summarizer(llm, max_chars=500)(conversation(12), 1)
    text = out[0].content[0]["text"]
    assert len(text) <= 500 and text.startswith("[Summary] word")
    assert text.endswith("[summary truncated to 500 characters]")
    assert "at most 490 characters" in llm.prompts()[0]


class Verbose:
    """A model that ignores the length asked for: the previous summary and every new line."""

    label = "verbose"

    def complete(self, system: str, prompt: str) -> str:
        previous = prompt.split("<previous_summary>\n")[1].split("\n</previous_summary>")[0]
        return previous + "\n" + prompt.split("<new_messages>\n")[1].split("\n</new_")[0]


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_a_growing_summary_survives_many_compressions_in_a_row() -> None:
    # max_chars above the setting: the summary keeps to MAX_SUMMARY_CHARS, or is refused.
    with override_settings(SQUAD_MEMORY={"MAX_SUMMARY_CHARS": 1500}):
        buffer = summarizers.compress_many_times(LLMSummarizer(Verbose(), max_chars=3000), 12)
    assert buffer[0].content[0]["text"].endswith("[summary truncated to 1500 characters]")


def test_timeout_gives_summarizer_timeout(llm: FakeLLM) -> None:
    llm.replies = [Reply(body=completion("late"), delay=2.0)]
    started = time.monotonic()
    with pytest.raises(SummarizerTimeout, match=r"did not answer within 0\.3 s"):
        summarizer(llm, timeout=0.3)(conversation(10), 1)
    assert time.monotonic() - started < 1.9


def test_server_error_gives_backend_error(llm: FakeLLM) -> None:
    llm.replies = [Reply(status=500, body={"error": {"message": "model crashed"}})]
    with pytest.raises(SummarizerBackendError, match="HTTP 500") as info:
        summarizer(llm)(conversation(10), 1)
    assert not isinstance(info.value, SummarizerRateLimited)


def test_rate_limit_gives_rate_limited(llm: FakeLLM) -> None:
    llm.replies = [
        Reply(status=429, body={"error": {"message": "slow down"}}, headers={"retry-after": "7"})
    ]
    with pytest.raises(SummarizerRateLimited, match="retry-after: 7"):
        summarizer(llm)(conversation(10), 1)


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body="this is not json"),
        Reply(body={"unexpected": True}),
        Reply(body={**completion("x"), "choices": []}),
        Reply(body=completion(None)),
        Reply(body=completion("   ")),
    ],
    ids=["not-json", "no-choices-key", "empty-choices", "null-content", "blank-content"],
)
def test_malformed_reply_gives_bad_reply(llm: FakeLLM, reply: Reply) -> None:
    llm.replies = [reply]
    with pytest.raises(SummarizerBadReply):
        summarizer(llm)(conversation(10), 1)


def test_unreachable_endpoint_gives_backend_error() -> None:
    bad = LLMSummarizer.openai(
        "m", base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0, timeout=2.0
    )
    with pytest.raises(SummarizerBackendError, match="Cannot reach"):
        bad(conversation(10), 1)


def test_anthropic_backend(llm: FakeLLM) -> None:
    llm.replies = [Reply(body=anthropic_message("Claude's summary."))]
    summ = LLMSummarizer.anthropic("claude-test", base_url=llm.url, api_key="k", max_retries=0)
    out = summ([make_summary("before"), *conversation(9)], 1)
    assert out[0].content[0]["text"] == "[Summary] Claude's summary."
    request = llm.requests[0]
    assert (
        request["path"] == "/v1/messages" and "before" in request["json"]["messages"][0]["content"]
    )
    llm.replies = [Reply(status=429, body={"type": "error", "error": {"message": "busy"}})]
    with pytest.raises(SummarizerRateLimited):
        summ(conversation(10), 1)


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_storage_records_a_500_then_the_next_save_succeeds(llm: FakeLLM) -> None:
    llm.replies = [
        Reply(status=500, body={"error": {"message": "overloaded"}}),
        Reply(body=completion("Recovered summary.")),
    ]
    storage = SummarizingChatStorage(
        DjangoChatStorage(), summarizer(llm), trigger_at=3, keep_last=1
    )
    play(storage, conversation(8))
    assert not Compression.objects.exists()
    before = storage.fetch_chat_sync("u", "s", "a")  # over the threshold: first compression
    assert len(before) == 8 and not is_summary(before[0])
    failed = Compression.objects.get()
    assert failed.outcome == Compression.Outcome.FAILED
    assert "SummarizerBackendError" in failed.error and "HTTP 500" in failed.error
    assert Slot.objects.get().last_failed
    buffer = storage.save_chat_message_sync("u", "s", "a", msg("user", "one more"))
    assert texts(buffer)[0] == "[Summary] Recovered summary."
    assert list(Compression.objects.order_by("id").values_list("outcome", flat=True)) == [
        "failed",
        "applied",
    ]
    assert not Slot.objects.get().last_failed
    assert len(storage.fetch_all_chats_sync("u", "s")) == 9  # raw history kept whole


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_settings_path_summarizer(llm: FakeLLM) -> None:
    llm.replies = [Reply(body=completion("From settings."))]
    config = {
        "SUMMARIZER": "squad_memory.summarizers.llm.summarize",
        "TRIGGER_AT": 3,
        "KEEP_LAST": 1,
        "LLM": {
            "BASE_URL": f"{llm.url}/v1",
            "API_KEY": "k",
            "MODEL": "settings-model",
            "MAX_RETRIES": 0,
        },
    }
    with override_settings(SQUAD_MEMORY=config):
        storage = get_storage()
        play(storage, conversation(8))
        assert texts(storage.fetch_chat_sync("u", "s", "a"))[0] == "[Summary] From settings."
    assert llm.requests[0]["json"]["model"] == "settings-model"
    assert Compression.objects.get().summarizer == "squad_memory.summarizers.llm.summarize"


def test_a_summary_within_a_token_budget(llm: FakeLLM) -> None:
    llm.replies = [Reply(body=completion("Short.")), Reply(body=completion("Shorter."))]
    summarizer(llm, summary_tokens=150)(conversation(10), 1)
    custom = "Fold {messages} into {previous}, under {max_tokens} tokens."
    summarizer(llm, summary_tokens=80, prompt=custom)(conversation(10), 1)
    first, second = llm.prompts()
    assert first.endswith("Keep the summary within 150 tokens.")
    assert second.endswith("under 80 tokens.") and "Keep the summary" not in second
    assert [r["json"]["max_tokens"] for r in llm.requests] == [150, 80]


def test_the_token_budget_from_settings(llm: FakeLLM) -> None:
    from squad_memory.summarizers.llm import from_settings

    llm.replies = [Reply(body=completion("From settings."))]
    config = {
        "LLM": {
            "BASE_URL": f"{llm.url}/v1",
            "API_KEY": "k",
            "MODEL": "m",
            "MAX_RETRIES": 0,
            "SUMMARY_TOKENS": 120,
        }
    }
    with override_settings(SQUAD_MEMORY=config):
        from_settings()(conversation(8), 1)
    assert llm.requests[0]["json"]["max_tokens"] == 120
    assert "within 120 tokens" in llm.prompts()[0]
