"""The offline summarizer and the cut/marker rules it shares with LLMSummarizer."""

from __future__ import annotations

from typing import Any

import pytest
from agent_squad.types import ConversationMessage
from django.test import override_settings

from squad_memory.conf import DEFAULTS
from squad_memory.models import Compression
from squad_memory.storage import get_storage
from squad_memory.summarizers import SUMMARY_PREFIX, OfflineSummarizer, is_summary
from squad_memory.summarizers.base import cap, make_summary, split
from squad_memory.summarizers.offline import summarize
from tests import summarizers
from tests.conftest import extra, msg, texts


def conversation(n: int, tag: str = "m") -> list[Any]:
    return [
        msg(
            "user" if i % 2 == 0 else "assistant",
            f"{tag}{i} first sentence. {tag}{i} second, which the summary leaves out.",
        )
        for i in range(n)
    ]


def test_offline_is_the_default_summarizer() -> None:
    assert DEFAULTS["SUMMARIZER"] == "squad_memory.summarizers.offline.summarize"


def test_offline_summary_is_extractive_honest_and_deterministic() -> None:
    history = conversation(12)
    out = summarize(history, 2)
    again = summarize(conversation(12), 2)
    assert [m.content for m in out] == [m.content for m in again]
    text = out[0].content[0]["text"]
    assert text.startswith("[Summary] (extractive, offline) Covers 7 messages")
    assert "- user: m0 first sentence." in text and "m0 second" not in text
    assert "- user: m6 first sentence." in text and "m7" not in text
    assert texts(out[1:]) == texts(history[7:])
    assert [m.role for m in out] == ["user", "assistant", "user", "assistant", "user", "assistant"]


def test_offline_is_incremental() -> None:
    first = summarize(conversation(12, "a"), 2)
    second = summarize([*first, *conversation(10, "b")], 2)
    text = second[0].content[0]["text"]
    assert "Covers 17 messages" in text  # 7 folded before, then a7..a11 and b0..b4
    assert "- user: a0 first sentence." in text and "- user: b4 first sentence." in text
    assert "b5" not in text and texts(second)[1].startswith("b5")
    assert text.count("[Summary]") == 1


def test_offline_cap_drops_oldest_lines_and_says_so() -> None:
    out = OfflineSummarizer(max_chars=400)(conversation(60), 2)
    text = out[0].content[0]["text"]
    assert len(text) <= 400
    assert "lines were dropped to stay under 400 characters" in text
    assert "m54 first sentence." in text and "- user: m0 " not in text
    again = OfflineSummarizer(max_chars=400)([*out, *conversation(20, "z")], 2)
    assert len(again[0].content[0]["text"]) <= 400 and "z14 first" in again[0].content[0]["text"]


def test_offline_uses_the_setting_cap() -> None:
    with override_settings(SQUAD_MEMORY={"MAX_SUMMARY_CHARS": 300}):
        out = summarize(conversation(40), 2)
    assert len(out[0].content[0]["text"]) <= 300


@pytest.mark.django_db(transaction=True)  # compresses on commit
@pytest.mark.parametrize("max_chars", [None, 5000])
def test_offline_survives_many_compressions_in_a_row(max_chars: int | None) -> None:
    # 5000 is above the setting: the summarizer keeps to MAX_SUMMARY_CHARS, or is refused.
    with override_settings(SQUAD_MEMORY={"MAX_SUMMARY_CHARS": 1000}):
        buffer = summarizers.compress_many_times(OfflineSummarizer(max_chars), times=12)
    text = buffer[0].content[0]["text"]
    assert "lines were dropped to stay under 1000 characters" in text and "Covers" in text


def test_offline_folds_a_foreign_summary_in() -> None:
    out = summarize([make_summary("The user is Ana from Porto."), *conversation(10)], 1)
    assert "- earlier summary: The user is Ana from Porto." in out[0].content[0]["text"]


def test_nothing_to_fold_returns_history_unchanged() -> None:
    history = conversation(3)
    assert texts(summarize(history, 2)) == texts(history)


def test_is_summary() -> None:
    assert is_summary(make_summary("x"))
    assert is_summary({"role": "user", "content": [{"text": f"{SUMMARY_PREFIX} x"}]})
    assert not is_summary({"role": "assistant", "content": [{"text": "[Summary] x"}]})
    assert not is_summary(msg("user", "Summary: x"))
    assert not is_summary({"role": "user", "content": []})


def test_cap_keeps_limit_and_says_so() -> None:
    assert cap("short", 100) == "short"
    capped = cap("x" * 1000, 200)
    assert len(capped) == 200 and capped.endswith("[summary truncated to 200 characters]")


def tool_turn(n: int) -> list[Any]:
    use = {"toolUse": {"toolUseId": f"t{n}", "name": "lookup", "input": {"q": n}}}
    result = {"toolResult": {"toolUseId": f"t{n}", "content": [{"text": "found"}]}}
    return [
        ConversationMessage(role="assistant", content=[use]),
        ConversationMessage(role="user", content=[result]),
    ]


@pytest.mark.parametrize("keep_last", [0, 1, 2, 3])
def test_split_never_separates_tool_pairs(keep_last: int) -> None:
    history = [msg("user", "q0")]
    for n in range(6):
        history += [*tool_turn(n), msg("assistant", f"a{n}"), msg("user", f"q{n + 1}")]
    history.append(msg("assistant", "last"))
    part = split(history, keep_last)
    uses = {b["toolUse"]["toolUseId"] for m in part.recent for b in m.content if "toolUse" in b}
    results = {
        b["toolResult"]["toolUseId"] for m in part.recent for b in m.content if "toolResult" in b
    }
    assert results <= uses
    assert len(part.recent) >= keep_last * 2
    assert not part.recent or part.recent[0].role == "assistant"


def test_split_tool_pair_without_ids_by_adjacency() -> None:
    use = ConversationMessage(role="assistant", content=[{"toolUse": {"name": "x"}}])
    result = ConversationMessage(role="user", content=[{"toolResult": {"content": []}}])
    history = [*conversation(6), use, result, msg("assistant", "done")]
    part = split(history, 1)
    assert part.recent[0] is use


def test_split_keeps_previous_summary_out_of_the_fold() -> None:
    part = split([make_summary("before"), *conversation(8)], 1)
    assert part.previous == "before" and not any(is_summary(m) for m in part.fold)


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_default_storage_compresses_with_offline() -> None:
    storage = get_storage()
    for i, message in enumerate(conversation(45)):
        if i % 2 == 0:
            storage.fetch_chat_sync("u", "s", "a")
        storage.save_chat_message_sync("u", "s", "a", message)
    buffer = storage.fetch_chat_sync("u", "s", "a")
    assert is_summary(buffer[0]) and len(buffer) < 45
    log = Compression.objects.filter(outcome="applied").first()
    assert log is not None and log.summarizer == "squad_memory.summarizers.offline.summarize"


@pytest.mark.parametrize(
    ("config", "check_id"),
    [
        ({"LLM": "openai"}, "squad_memory.E020"),
        ({"MAX_SUMMARY_CHARS": 10}, "squad_memory.E021"),
        (
            {"SUMMARIZER": "squad_memory.summarizers.llm.summarize", "LLM": {"BACKEND": "x"}},
            "squad_memory.E022",
        ),
        ({"SUMMARIZER": "squad_memory.summarizers.llm.summarize"}, "squad_memory.E023"),
    ],
)
def test_summarizer_settings_checks(config: dict[str, Any], check_id: str) -> None:
    from squad_memory.checks import check_settings

    extra("openai", "openai")  # the valid LLM configuration below needs its SDK
    with override_settings(SQUAD_MEMORY=config):
        assert check_id in [e.id for e in check_settings()]
    with override_settings(
        SQUAD_MEMORY={"SUMMARIZER": "squad_memory.summarizers.llm.summarize", "LLM": {"MODEL": "m"}}
    ):
        assert not [e.id for e in check_settings() if e.id.startswith("squad_memory.E02")]
