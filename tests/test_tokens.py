"""Token budgets: counts stored at save, running totals, TRIGGER_TOKENS, MAX_BUFFER_TOKENS."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from agent_squad.types import ConversationMessage
from django.apps import apps as django_apps
from django.db import connection
from django.db.models import F, Sum

import squad_memory
from squad_memory import compression, rules
from squad_memory.exceptions import ConfigurationError
from squad_memory.models import Compression, Limits, Message, Slot
from squad_memory.operations import housekeeping
from squad_memory.rules import needs_compression
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from tests.celery_fixtures import queued_args
from tests.conftest import extra, msg, texts

# Transactional: an inline compression runs on commit (transaction.on_commit), as in a
# project's autocommit code; a rolled-back test would never run it.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.prepared]
pytest_plugins = ["tests.celery_fixtures"]

KEY = ("u", "s", "a")
CALLS: list[dict[str, Any]] = []


def words(message: dict[str, Any]) -> int:
    """A custom counter: one token per whitespace-separated word of the text blocks."""
    CALLS.append(message)
    return sum(len(str(b.get("text", "")).split()) for b in message["content"])


def short(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    """A summary of constant size: ``S<n>``, n the messages folded so far."""
    cut = max(len(history) - keep_last * 2, 0)
    return [ConversationMessage("user", [{"text": f"S{cut}"}]), *history[cut:]]


FAIL = {"on": False}


def flaky_short(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    if FAIL["on"]:
        raise RuntimeError("the summarizer is down")
    return short(history, keep_last)


def wrap(summarizer: Any = short, trigger_at: int = 20, **kw: Any) -> SummarizingChatStorage:
    return SummarizingChatStorage(DjangoChatStorage(), summarizer, trigger_at, 1, **kw)


def say(store: SummarizingChatStorage, i: int, size: int = 40) -> None:
    """One pair of ``size``-byte texts: ``size / 4`` tokens each by the estimate."""
    store.save_chat_message_sync(*KEY, msg("user", f"q{i}".ljust(size, ".")))
    store.save_chat_message_sync(*KEY, msg("assistant", f"a{i}".ljust(size, ".")))


def slot() -> Slot:
    return Slot.objects.get()


def assert_totals(s: Slot) -> None:
    """The running totals equal a recount of the summary and of the stored rows after it."""
    s.refresh_from_db()
    rows = Message.objects.filter(slot=s, seq__gt=s.covered_seq)
    stored = rows.aggregate(total=Sum("tokens"))["total"] or 0
    assert s.summary_tokens == rules.count_all(s.summary)
    assert s.buffer_tokens == s.summary_tokens + stored


# -- the counter -------------------------------------------------------------------------------
def test_the_default_estimate_is_utf8_bytes_over_four_plus_a_cost_per_other_block() -> None:
    assert rules.estimate_tokens({"role": "user", "content": [], "citations": None}) == 0
    assert rules.estimate_tokens({"role": "user", "content": [{"text": "abcde"}]}) == 2
    assert rules.estimate_tokens({"role": "user", "content": [{"text": "é" * 4}]}) == 2  # 8 bytes
    blocks = [{"text": "abcd"}, {"image": {"format": "png"}}, {"toolUse": {"name": "x"}}]
    assert (
        rules.estimate_tokens({"role": "user", "content": blocks})
        == 1 + 2 * rules.NON_TEXT_BLOCK_TOKENS
    )


def test_each_message_is_counted_once_at_save_and_stored() -> None:
    store = DjangoChatStorage()
    store.save_chat_message_sync(*KEY, msg("user", "x" * 40))
    store.save_chat_messages_sync(*KEY, [msg("assistant", "y" * 8), msg("user", "z")])
    assert list(Message.objects.order_by("seq").values_list("tokens", flat=True)) == [10, 2, 1]
    assert slot().buffer_tokens == 13
    assert_totals(slot())


def test_a_custom_counter_plugged_by_dotted_path(settings: Any) -> None:
    settings.SQUAD_MEMORY = {"TOKEN_COUNTER": "tests.test_tokens.words"}
    CALLS.clear()
    store = wrap(trigger_at=20, trigger_tokens=7)
    store.save_chat_message_sync(*KEY, msg("user", "one two three"))
    store.save_chat_message_sync(*KEY, msg("assistant", "four five"))
    assert [c["role"] for c in CALLS] == ["user", "assistant"]  # once each, the stored dict
    assert set(CALLS[0]) >= {"role", "content", "citations"}
    assert list(Message.objects.order_by("seq").values_list("tokens", flat=True)) == [3, 2]
    store.fetch_chat_sync(*KEY)  # 5 words: not over 7, no activation
    assert not slot().active
    store.save_chat_message_sync(*KEY, msg("user", "six seven eight"))
    assert texts(store.fetch_chat_sync(*KEY))[0] == "S1"  # 8 words > 7: activated
    assert_totals(slot())


def raises(message: dict[str, Any]) -> int:
    raise RuntimeError("the tokenizer is not installed")


@pytest.mark.parametrize(
    ("counter", "reason"),
    [
        (lambda m: "many", "it returned str, not int"),
        (raises, "RuntimeError: the tokenizer is not installed"),
        ("no.such.counter", "cannot be imported"),
    ],
)
def test_a_failing_counter_never_loses_the_message(
    settings: Any, caplog: pytest.LogCaptureFixture, counter: Any, reason: str
) -> None:
    settings.SQUAD_MEMORY = {"TOKEN_COUNTER": counter}
    DjangoChatStorage().save_chat_message_sync(*KEY, msg("user", "x" * 40))
    assert list(Message.objects.values_list("tokens", flat=True)) == [10]  # the estimate
    assert reason in caplog.text and "stored with the estimate" in caplog.text


def test_a_count_past_a_32_bit_integer_is_stored_as_the_largest_one(settings: Any) -> None:
    settings.SQUAD_MEMORY = {"TOKEN_COUNTER": lambda m: 2**40}
    DjangoChatStorage().save_chat_messages_sync(*KEY, [msg("user", "a"), msg("assistant", "b")])
    assert set(Message.objects.values_list("tokens", flat=True)) == {2**31 - 1}
    assert slot().buffer_tokens == 2 * (2**31 - 1)


# -- TRIGGER_TOKENS ----------------------------------------------------------------------------
def test_trigger_tokens_compresses_before_trigger_at() -> None:
    store = wrap(short, trigger_at=20, trigger_tokens=100)
    for i in range(2):
        say(store, i)
    store.fetch_chat_sync(*KEY)  # 40 tokens: stays inactive
    assert not slot().active
    for i in range(2, 6):
        say(store, i)
    store.fetch_chat_sync(*KEY)  # 120 tokens > 100: activates and compresses
    assert slot().active and Compression.objects.filter(outcome="applied").count() == 1
    assert_totals(slot())
    applied = Compression.objects.count()
    while Compression.objects.count() == applied:  # saves compress again once over 100
        i += 1
        say(store, i)
        assert_totals(slot())
    assert slot().last_seq < 2 * 20  # long before TRIGGER_AT (20 pairs)
    assert slot().buffer_tokens <= 100
    assert_totals(slot())


def test_whichever_of_the_triggers_trips_first() -> None:
    store = wrap(trigger_at=2, trigger_tokens=10_000)
    for i in range(3):
        say(store, i, size=4)
    store.fetch_chat_sync(*KEY)
    assert slot().active and Compression.objects.filter(outcome="applied").count() == 1


def test_a_slot_override_of_trigger_tokens(settings: Any) -> None:
    store = wrap(trigger_at=20)  # no token trigger in the storage
    for i in range(3):
        say(store, i)
    store.fetch_chat_sync(*KEY)
    assert not slot().active  # 60 tokens, 3 pairs
    Slot.objects.update(trigger_tokens=50)
    store.fetch_chat_sync(*KEY)
    assert slot().active and Compression.objects.filter(outcome="applied").count() == 1
    for i in range(3, 6):
        say(store, i)  # a save claims by the override too
    assert Compression.objects.filter(outcome="applied").count() >= 2
    assert_totals(slot())


def test_a_save_during_a_compression_keeps_the_total_exact() -> None:
    plain = DjangoChatStorage()

    def saving(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
        if not Message.objects.filter(role="user", content__0__text="meanwhile").exists():
            plain.save_chat_message_sync(*KEY, msg("user", "meanwhile"))  # no transaction open
        return short(history, keep_last)

    store = wrap(saving, trigger_at=20, trigger_tokens=50)
    for i in range(3):
        say(store, i)
    store.fetch_chat_sync(*KEY)
    assert Compression.objects.get().outcome == "applied"
    assert texts(store.fetch_chat_sync(*KEY))[-1] == "meanwhile"  # after the output
    assert_totals(slot())


MEANWHILE = [msg("user", "meanwhile " + "m" * 40), msg("assistant", "noted " + "n" * 40)]


def saving_meanwhile(
    history: list[ConversationMessage], keep_last: int
) -> list[ConversationMessage]:
    """:func:`short`, after a pair is saved (no transaction open) while it runs: once per call."""
    DjangoChatStorage().save_chat_messages_sync(*KEY, MEANWHILE)
    return short(history, keep_last)


@pytest.mark.parametrize("way", ["save", "fetch", "async fetch", "compress now", "second"])
def test_right_after_a_compression_buffer_tokens_is_the_summary_and_the_rows_after_it(
    way: str,
) -> None:
    """As its help text says: the summary's tokens plus the stored tokens of the messages
    after it, the moment a compression is applied, whichever way it ran, with a save that
    landed while the summarizer ran (counted once, after the summary)."""
    store = wrap("tests.test_tokens.saving_meanwhile", trigger_at=3)
    plain = DjangoChatStorage()
    for i in range(4):
        plain.save_chat_messages_sync(*KEY, [msg("user", f"q{i}" * 9), msg("assistant", f"a{i}")])
    if way == "save":  # an active buffer over its threshold again: the save compresses
        store.fetch_chat_sync(*KEY)
        store.save_chat_messages_sync(*KEY, [msg("user", "q5" * 40), msg("assistant", "a5")])
        assert Compression.objects.filter(outcome="applied", trigger="save").count() == 1
    elif way == "fetch":
        store.fetch_chat_sync(*KEY)
    elif way == "async fetch":
        asyncio.run(store.fetch_chat(*KEY))
    elif way == "compress now":
        assert store.compress_now(*KEY).applied
    else:  # a compression of a buffer that starts with a summary
        store.fetch_chat_sync(*KEY)
        plain.save_chat_messages_sync(*KEY, [msg("user", "q9" * 30), msg("assistant", "a9")])
        assert store.compress_now(*KEY).applied
    s = slot()
    last = Compression.objects.filter(outcome="applied").latest("id")
    assert s.covered_seq == last.to_seq and s.last_seq > s.covered_seq  # the pair after it
    after = Message.objects.filter(slot=s, seq__gt=s.covered_seq)
    assert [m.content[0]["text"] for m in after.order_by("seq")][-2:] == texts(MEANWHILE)
    stored = after.aggregate(total=Sum("tokens"))["total"]
    assert s.summary_tokens == rules.count_all(s.summary) > 0
    assert s.buffer_tokens == s.summary_tokens + stored


def test_reset_and_reactivation_recount_the_buffer() -> None:
    store = wrap(trigger_at=20, trigger_tokens=50)
    for i in range(3):
        say(store, i)
    store.fetch_chat_sync(*KEY)
    assert compression.reset(slot().pk)
    assert not slot().active and slot().summary_tokens == 0
    assert_totals(slot())  # every stored row again
    assert slot().buffer_tokens == 60
    store.fetch_chat_sync(*KEY)
    assert slot().active
    assert_totals(slot())


def test_the_sweep_applies_the_same_rule(settings: Any) -> None:
    settings.SQUAD_MEMORY = {"TRIGGER_AT": 20, "TRIGGER_TOKENS": 50, "KEEP_LAST": 1}
    for agent, pairs, active, override in [
        ("few", 1, True, None),  # 20 tokens
        ("many", 3, True, None),  # 60 tokens > 50
        ("override", 1, True, 10),  # 20 tokens > its own 10
        ("inactive", 3, False, None),
    ]:
        s = Slot.objects.create(
            user_id="u", session_id="s", agent_id=agent, active=active, trigger_tokens=override
        )
        rows = [msg("user" if n % 2 == 0 else "assistant", "x" * 40) for n in range(2 * pairs)]
        DjangoChatStorage().save_chat_messages_sync("u", "s", agent, rows)
        s.refresh_from_db()
        assert s.buffer_tokens == 20 * pairs
    limits = Limits(20, 1, trigger_tokens=50)
    over = set(Slot.objects.over_threshold(limits).values_list("agent_id", flat=True))
    rule = {s.agent_id for s in Slot.objects.filter(active=True) if s.needs_compression(limits)}
    assert over == rule == {"many", "override"}
    inactive = Slot.objects.inactive_over_threshold(limits)
    assert set(inactive.values_list("agent_id", flat=True)) == {"inactive"}
    no_tokens = Slot.objects.over_threshold(Limits(20, 1))
    assert not no_tokens.filter(agent_id="many").exists()  # tokens off
    report = housekeeping.sweep(activate=True)
    assert (report.enqueued, report.activated) == (2, 1)
    for s in Slot.objects.all():
        assert_totals(s)


def test_the_rule_is_one_function() -> None:
    assert needs_compression(5, 2) and not needs_compression(4, 2)
    assert needs_compression(1, 20, 101, 100) and not needs_compression(1, 20, 100, 100)
    assert not needs_compression(1, 20, 10**9, None)
    # A prefix over the budget: folded again after half a budget, or once its kept pairs left
    assert not needs_compression(4, 20, 150, 100, 140, 3, keep_last=2)
    assert needs_compression(5, 20, 150, 100, 140, 4, keep_last=2)
    assert needs_compression(3, 20, 160, 100, 150, 2, keep_last=0)


# -- MAX_BUFFER_TOKENS -------------------------------------------------------------------------
def test_max_buffer_tokens_bounds_what_fetch_returns(settings: Any) -> None:
    settings.SQUAD_MEMORY = {"MAX_BUFFER_TOKENS": 100}  # what the admin judges by
    store = wrap(flaky_short, trigger_at=2, max_buffer_tokens=100)
    for i in range(3):
        say(store, i)
    store.fetch_chat_sync(*KEY)  # active, summarized
    FAIL["on"] = True
    try:
        for i in range(3, 12):
            say(store, i)
        s = slot()
        assert s.buffer_tokens > 100 and s.state == "over_limit"
        assert set(Slot.objects.in_state("over_limit", Limits(2, 1, max_buffer_tokens=100))) == {s}
        fetched = store.fetch_chat_sync(*KEY)
        prefix, tail = fetched[: s.summary_length], fetched[s.summary_length :]
        assert [m.content for m in prefix] == [m["content"] for m in s.summary]
        spent = s.summary_tokens + sum(rules.estimate_tokens({"content": m.content}) for m in tail)
        assert spent <= 100
        assert len(tail) >= 2 and texts(tail)[-1].startswith("a11")  # the newest fit
        roles = [m.role for m in fetched[s.summary_length - 1 :]]  # the tail follows the prefix
        assert all(a != b for a, b in itertools.pairwise(roles))
    finally:
        FAIL["on"] = False
    say(store, 12)  # the next applied compression brings it back under the limit
    assert slot().state == "active"
    assert_totals(slot())


def test_policy_checks_the_token_budgets() -> None:
    with pytest.raises(ConfigurationError, match="trigger_tokens"):
        wrap(trigger_tokens=-1)
    with pytest.raises(ConfigurationError, match="at least trigger_tokens"):
        wrap(trigger_tokens=100, max_buffer_tokens=50)


# -- query counts: the trigger stays O(1) per save ------------------------------------------------
@pytest.mark.parametrize("stored", [10, 10_000])
def test_token_budgets_cost_no_query_that_grows_with_the_history(
    stored: int, count_queries: Any, settings: Any
) -> None:
    settings.SQUAD_MEMORY = {"MAX_SUMMARY_CHARS": 200_000}
    store = wrap(trigger_at=10_000, trigger_tokens=200, max_buffer_tokens=10_000)
    history = [msg("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(stored)]
    store.save_chat_messages_sync(*KEY, history)
    store.compress_now(*KEY)
    store.save_chat_message_sync(*KEY, msg("user", "q"))
    with count_queries() as fetch:
        store.fetch_chat_sync(*KEY)
    with count_queries() as save:
        store.save_chat_message_sync(*KEY, msg("assistant", "a"))
    for i in range(100):  # up to the token trigger, 10 tokens a message: the compressing save
        with count_queries() as compressing:
            store.save_chat_message_sync(*KEY, msg(["user", "assistant"][i % 2], "x" * 40))
        if Compression.objects.count() == 2:
            break
    assert Compression.objects.filter(outcome="applied").count() == 2
    assert fetch.count == 1, fetch.statements
    assert save.count <= 2, save.statements
    assert compressing.count <= 9, compressing.statements
    assert_totals(slot())
    for n in range(i + 1, i + 5):  # four more messages after the summary, 10 tokens each
        store.save_chat_message_sync(*KEY, msg(["user", "assistant"][n % 2], f"n{n}".ljust(40)))
    Slot.objects.update(max_buffer_tokens=F("summary_tokens") + 25)  # over the hard limit
    with count_queries() as limited:
        cut = store.fetch_chat_sync(*KEY)
    assert 1 <= len(cut) - slot().summary_length <= 2  # the newest that fit, roles alternating
    assert texts(cut)[-1] == f"n{i + 4}".ljust(40)
    assert limited.count <= 3, limited.statements
    print(
        f"queries at {stored} stored ({connection.vendor}): fetch {fetch.count}, save "
        f"{save.count}, compressing save {compressing.count}, over-limit fetch {limited.count}"
    )


# -- the migration's backfill --------------------------------------------------------------------
def test_the_migration_backfills_counts_and_totals(monkeypatch: Any) -> None:
    import importlib

    migration = importlib.import_module("squad_memory.migrations.0006_tokens")
    store = wrap(trigger_at=2)
    for i in range(4):
        say(store, i)
    store.fetch_chat_sync(*KEY)
    DjangoChatStorage().save_chat_messages_sync("u", "s", "b", [msg("user", "x" * 40)])
    before = {s.pk: (s.buffer_tokens, s.summary_tokens) for s in Slot.objects.all()}
    counts = dict(Message.objects.values_list("pk", "tokens"))
    Message.objects.update(tokens=0)
    Slot.objects.update(buffer_tokens=0, summary_tokens=0)

    class Editor:
        pass

    editor = Editor()
    editor.connection = connection  # type: ignore[attr-defined]
    monkeypatch.setattr(migration, "BATCH", 3)  # several batches
    migration.fill_message_tokens(django_apps, editor)
    migration.fill_slot_tokens(django_apps, editor)
    assert dict(Message.objects.values_list("pk", "tokens")) == counts
    assert {s.pk: (s.buffer_tokens, s.summary_tokens) for s in Slot.objects.all()} == before
    assert slot_by("a").summary_tokens > 0 and slot_by("b").buffer_tokens == 10


def slot_by(agent: str) -> Slot:
    return Slot.objects.get(agent_id=agent)


def test_a_long_batch_stays_under_sqlites_variable_limit() -> None:
    rows = [msg("user" if i % 2 == 0 else "assistant", "x" * 8) for i in range(241)]
    DjangoChatStorage().save_chat_messages_sync(*KEY, rows)  # bulk_create batches the INSERTs
    assert slot().buffer_tokens == 2 * len(rows)
    assert_totals(slot())


def test_the_sweeps_query_and_the_rule_agree_on_every_case() -> None:
    cases = itertools.product(
        [0, 3, 60],  # summary_tokens
        [0, 40, 49, 51, 90, 200],  # tokens after the summary
        [None, 50],  # the slot's override
        [None, 100],  # the default
        [2, 3, 4, 41],  # tail messages (trigger_at 20: 41 > 40 trips by pairs)
        [None, 0],  # the slot's keep_last (a prefix over the budget is folded after 2 pairs, or 1)
    )
    for n, (summary, tail_tokens, override, default, tail, keep) in enumerate(cases):
        Slot.objects.create(
            user_id="u",
            session_id=f"{default}",
            agent_id=str(n),
            active=True,
            summary_length=1,
            summary_tokens=summary,
            buffer_tokens=summary + tail_tokens,
            last_seq=tail,
            trigger_tokens=override,
            keep_last=keep,
        )
    for default in (None, 100):
        slots = Slot.objects.filter(session_id=f"{default}")
        limits = Limits(20, 2, trigger_tokens=default)
        over = set(slots.over_threshold(limits).values_list("pk", flat=True))
        rule = {s.pk for s in slots if s.needs_compression(limits)}
        assert over == rule and 0 < len(rule) < slots.count()


def test_celery_mode_queues_one_compression_on_a_token_crossing(redis_queue: Any) -> None:
    store = wrap("tests.celery_summarizers.short", trigger_at=20, mode="celery", trigger_tokens=50)
    for i in range(2):
        say(store, i)  # 40 tokens
    store.fetch_chat_sync(*KEY)
    assert not slot().active and queued_args(redis_queue) == []
    say(store, 2)  # 60 tokens
    store.fetch_chat_sync(*KEY)  # activates: its compression is queued for a worker
    say(store, 3)  # the claim is held: no second task
    assert slot().active and len(queued_args(redis_queue)) == 1
    assert_totals(slot())


# -- a message bigger than the whole budget ------------------------------------------------------
BIG_TURN = 3


def conversation_saver(path: str) -> Any:
    """Save one message as agent-squad does (``"storage"``) or as an API client posts it."""
    store = squad_memory.get_storage()
    if path == "storage":
        return lambda role, text: store.save_chat_message_sync(*KEY, msg(role, text))
    from tests.api_support import client_for, make_user, one, post

    user = make_user("big")
    client = client_for(user)
    KEY_OF[path] = (str(user.pk), "s", "a")

    def save(role: str, text: str) -> None:
        body = {"session_id": "s", "agent_id": "a", "message": one(role, text)}
        assert post(client, body).status_code == 201

    return save


KEY_OF: dict[str, tuple[str, str, str]] = {"storage": KEY}


@pytest.mark.parametrize("path", ["storage", "api"])
def test_a_message_bigger_than_the_budget_never_freezes_the_context(
    settings: Any, path: str
) -> None:
    """The README's budget and a 60 KB message (the API accepts up to MAX_MESSAGE_BYTES):
    every fetch ends with the newest turn, the big message is shown verbatim while it is
    among the kept pairs, then folded, and the context is back within MAX_BUFFER_TOKENS."""
    if path == "api":
        extra("rest_framework", "api")
    settings.SQUAD_MEMORY = {"TRIGGER_TOKENS": 6000, "MAX_BUFFER_TOKENS": 12000}
    save, store = conversation_saver(path), squad_memory.get_storage()
    key = KEY_OF[path]
    big = "This is the big one. " + "z" * (60 * 1024)
    for turn in range(25):
        question = big if turn == BIG_TURN else f"question {turn}. " + "w" * 200
        store.fetch_chat_sync(*key)  # the agent reads its context, then both are saved
        save("user", question)
        assert texts(store.fetch_chat_sync(*key))[-1] == question
        save("assistant", f"answer {turn}.")
        fetched = store.fetch_chat_sync(*key)
        assert texts(fetched)[-2:] == [question, f"answer {turn}."], turn
        roles = [m.role for m in fetched]
        assert all(a != b for a, b in itertools.pairwise(roles)), turn
        spent = sum(rules.estimate_tokens({"content": m.content}) for m in fetched)
        if turn <= BIG_TURN + 1:  # within the keep_last (2) pairs after it
            assert spent <= 12000 + rules.estimate_tokens({"content": [{"text": big}]}), turn
        else:  # compressions caught up: the big message is folded into the summary
            assert spent <= 12000 and big not in texts(fetched), turn
    outcomes = list(Compression.objects.values_list("outcome", flat=True))
    assert outcomes.count("applied") >= 2 and "failed" not in outcomes
