"""The admin: slot list, slot page, actions, read-only logs, permissions and escaping."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.html import escape

import squad_memory
from squad_memory import compression
from squad_memory.admin import actions
from squad_memory.models import Compression, Message, Slot
from tests.celery_fixtures import queued_args
from tests.conftest import msg, texts

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.celery_fixtures"]

T0 = 1_700_000_000_000
SCRIPT = "<script>alert('x')</script>"


def make_slot(
    n: int, *, agent: str = "a", user: str = "u", session: str = "s", **fields: Any
) -> Slot:
    """A slot with ``n`` raw messages (q1, a2, q3, ...), written fast with bulk_create."""
    summary = fields.pop("summary", [])
    slot = Slot.objects.create(
        user_id=user,
        session_id=session,
        agent_id=agent,
        last_seq=n,
        last_role="assistant" if n % 2 == 0 else "user",
        summary=summary,
        summary_length=len(summary),
        **fields,
    )
    Message.objects.bulk_create(
        [
            Message(
                slot=slot,
                seq=i,
                role="user" if i % 2 else "assistant",
                content=[{"text": f"{'q' if i % 2 else 'a'}{i}"}],
                timestamp=T0 + i * 1000,
            )
            for i in range(1, n + 1)
        ],
        batch_size=1000,
    )
    return slot


def log_compression(slot: Slot, **fields: Any) -> Compression:
    now = timezone.now()
    values: dict[str, Any] = {
        "started_at": now,
        "finished_at": now,
        "duration_ms": 12,
        "from_seq": 1,
        "to_seq": 4,
        "input": [{"role": "user", "content": [{"text": "q1"}]}],
        "output": [{"role": "user", "content": [{"text": "SUMMARY-TEXT"}]}],
        "summarizer": "tests.summarize",
        "outcome": "applied",
    }
    values.update(fields)
    return Compression.objects.create(slot=slot, **values)


def jsonl(response: Any) -> list[Any]:
    """The lines of an export (the import format), each a JSON value."""
    return [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]


def url(name: str, *args: Any) -> str:
    return reverse(f"admin:squad_memory_{name}", args=args)


def staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def viewer_client() -> Client:
    client = Client()
    client.force_login(staff("viewer", "view_slot", "view_message", "view_compression"))
    return client


@pytest.fixture
def editor_client() -> Client:
    client = Client()
    client.force_login(staff("editor", "view_slot", "change_slot"))
    return client


@pytest.fixture
def nobody_client() -> Client:
    client = Client()
    client.force_login(staff("nobody"))
    return client


def active_slot(n: int = 12, covered: int = 8) -> Slot:
    summary = [{"role": "user", "content": [{"text": "SUMMARY-TEXT"}], "citations": None}]
    return make_slot(n, active=True, covered_seq=covered, summary=summary, version=1)


# -- slot list ---------------------------------------------------------------------------------
def test_slot_list_shows_counts_state_labels_and_activity(admin_client: Client) -> None:
    make_slot(6, user="alice")
    active_slot()
    make_slot(2, agent="pending-agent", pending_since=timezone.now(), pending_token="t")
    make_slot(2, agent="failed-agent", last_failed=True)
    page = admin_client.get(url("slot_changelist")).content.decode()
    for label in ("not active", "active", "compression pending", "last compression failed"):
        assert f">{label}<" in page
    assert "alice" in page and ">12<" in page  # raw message count of the active slot
    assert ">5<" in page  # its buffer: 1 summary message + messages 9..12
    assert "namespace" not in page.lower().split("<tbody")[0].split("<thead")[-1]


@pytest.mark.parametrize(
    ("state", "agent"), [("active", "b"), ("pending", "c"), ("failed", "d"), ("inactive", "a")]
)
def test_slot_list_filters_by_state(admin_client: Client, state: str, agent: str) -> None:
    make_slot(2, agent="a")
    make_slot(2, agent="b", active=True)
    make_slot(2, agent="c", active=True, pending_since=timezone.now(), last_failed=True)
    make_slot(2, agent="d", active=True, last_failed=True)
    response = admin_client.get(url("slot_changelist"), {"state": state})
    shown = [s.agent_id for s in response.context["cl"].result_list]
    assert shown == [agent]


def test_slot_list_filters_by_agent_and_date_and_searches_ids(admin_client: Client) -> None:
    make_slot(2, agent="planner", user="alice", session="s-123")
    make_slot(2, agent="coder", user="bob")
    by_agent = admin_client.get(url("slot_changelist"), {"agent_id": "coder"})
    assert [s.user_id for s in by_agent.context["cl"].result_list] == ["bob"]
    for term in ("alice", "s-123", "planner"):
        found = admin_client.get(url("slot_changelist"), {"q": term})
        assert [s.user_id for s in found.context["cl"].result_list] == ["alice"]
    year = timezone.now().year
    dated = admin_client.get(url("slot_changelist"), {"updated_at__year": year})
    assert len(dated.context["cl"].result_list) == 2
    assert (
        len(
            admin_client.get(url("slot_changelist"), {"updated_at__year": year - 3})
            .context["cl"]
            .result_list
        )
        == 0
    )


def test_slot_list_shows_namespace_only_when_a_foreign_store_has_slots(
    admin_client: Client,
) -> None:
    make_slot(2)
    assert "column-namespace" not in admin_client.get(url("slot_changelist")).content.decode()
    make_slot(2, agent="f", namespace="InMemoryChatStorage")
    page = admin_client.get(url("slot_changelist")).content.decode()
    assert "column-namespace" in page and "InMemoryChatStorage" in page


def test_slot_list_queries_do_not_grow_with_the_slots(
    admin_client: Client, count_queries: Any
) -> None:
    def queries() -> int:
        with count_queries() as counter:
            assert admin_client.get(url("slot_changelist")).status_code == 200
        return int(counter.count)

    for i in range(3):
        make_slot(2, user=f"u{i}", agent=f"agent{i % 2}")
    few = queries()
    for i in range(3, 30):
        make_slot(2, user=f"u{i}", agent=f"agent{i % 2}", active=i % 3 == 0)
    assert queries() == few


# -- slot page ---------------------------------------------------------------------------------
def test_slot_page_shows_until_when_a_failed_slot_backs_off(admin_client: Client) -> None:
    slot = make_slot(4, active=True, last_failed=True)
    Slot.objects.filter(pk=slot.pk).update(retry_after=timezone.now() + timedelta(minutes=5))
    page = admin_client.get(url("slot_change", slot.pk)).content.decode()
    found = re.search(r'field-retry_after">.*?<div class="readonly">(.*?)</div>', page, re.S)
    assert found, "no retry_after field on the slot page"
    field = page[found.start() : found.end()]
    shown = formats.localize(timezone.template_localtime(Slot.objects.get(pk=slot.pk).retry_after))
    assert "Retry after" in field and escape(shown) in field


def test_slot_page_shows_raw_history_buffer_and_compression_log(admin_client: Client) -> None:
    slot = active_slot(12, covered=8)
    log_compression(slot, from_seq=1, to_seq=8, error="")
    log_compression(slot, outcome="failed", output=None, error="BoomError: backend down")
    response = admin_client.get(url("slot_change", slot.pk))
    page = response.content.decode()
    assert 'id="raw-history"' in page and 'id="buffer"' in page and 'id="compression-log"' in page
    assert page.count("sm-badge-covered") == 8 + 1  # messages 1..8, and the legend
    buffer_pane = page.split('id="buffer"')[1].split('id="compression-log"')[0]
    assert (
        "Summary, covering raw messages up to #8" in buffer_pane and "SUMMARY-TEXT" in buffer_pane
    )
    assert [f">{t}<" in buffer_pane for t in ("q9", "a10", "q11", "a12")] == [True] * 4
    assert ">q7<" not in buffer_pane
    log = page.split('id="compression-log"')[1]
    assert "#1..#8" in log and "tests.<wbr>summarize" in log and "12 ms" in log
    assert "BoomError: backend down" in log and "failed" in log and "no output" in log


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_buffer_pane_is_what_fetch_chat_returns(admin_client: Client) -> None:
    store = squad_memory.get_storage()
    for i in range(44):
        store.save_chat_message_sync(
            "u", "s", "a", msg("user" if i % 2 == 0 else "assistant", f"t{i}")
        )
    fetched = texts(store.fetch_chat_sync("u", "s", "a"))  # 44 > 2 * 20: activates and compresses
    slot = Slot.objects.get()
    assert slot.active and slot.summary_length >= 1
    response = admin_client.get(url("slot_change", slot.pk))
    view = response.context["buffer"]
    shown = [b.text for e in view.summary + view.tail for b in e.blocks]
    assert shown == fetched
    assert len(view.summary) == slot.summary_length


def test_inactive_buffer_is_the_visible_history_and_trimmed_are_marked(
    admin_client: Client,
) -> None:
    slot = make_slot(10, visible_from_seq=7)
    response = admin_client.get(url("slot_change", slot.pk))
    page = response.content.decode()
    raw_pane = page.split('id="raw-history"')[1].split('id="buffer"')[0]
    assert raw_pane.count("sm-badge-trimmed") == 6 + 1  # messages 1..6, and the legend
    view = response.context["buffer"]
    assert not view.summary and [e.seq for e in view.tail] == [7, 8, 9, 10]
    assert "The buffer is not active" in page


def test_slot_page_pages_by_sequence_ranges(admin_client: Client) -> None:
    slot = make_slot(250)
    last = admin_client.get(url("slot_change", slot.pk)).context["page"]
    assert (last.number, last.count, last.first, last.last) == (3, 3, 201, 250)
    assert [e.seq for e in last.entries] == list(range(201, 251))
    first = admin_client.get(url("slot_change", slot.pk), {"page": 1}).context["page"]
    assert [e.seq for e in first.entries] == list(range(1, 101))
    jumped = admin_client.get(url("slot_change", slot.pk), {"seq": 150})
    assert jumped.context["page"].number == 2 and 'id="m-150"' in jumped.content.decode()
    clamped = admin_client.get(url("slot_change", slot.pk), {"page": 99}).context["page"]
    assert clamped.number == 3
    assert admin_client.get(url("slot_change", slot.pk), {"page": "x"}).status_code == 200


def test_slot_page_queries_do_not_grow_with_the_history(
    admin_client: Client, count_queries: Any
) -> None:
    def queries(slot: Slot) -> int:
        with count_queries() as counter:
            response = admin_client.get(url("slot_change", slot.pk))
        assert response.status_code == 200
        assert max(len(s) for s in counter.statements)  # statements captured
        return int(counter.count)

    short = active_slot(50, covered=40)
    log_compression(short)
    long = make_slot(
        5000, agent="long", active=True, covered_seq=4990, summary=short.summary, version=1
    )
    for _ in range(30):
        log_compression(long)
    queries(short)  # warm the per-process caches (content types, session) first
    assert queries(long) == queries(short)


def test_tool_use_and_tool_result_blocks_are_readable(admin_client: Client) -> None:
    slot = make_slot(0)
    Message.objects.bulk_create(
        [
            Message(
                slot=slot,
                seq=1,
                role="assistant",
                timestamp=T0,
                content=[
                    {"text": "Let me look."},
                    {
                        "toolUse": {
                            "toolUseId": "tu-1",
                            "name": "weather",
                            "input": {"city": "Oslo"},
                        }
                    },
                ],
            ),
            Message(
                slot=slot,
                seq=2,
                role="user",
                timestamp=T0,
                content=[
                    {
                        "toolResult": {
                            "toolUseId": "tu-1",
                            "status": "success",
                            "content": [{"text": "Sunny, 21C"}, {"json": {"temp": 21}}],
                        }
                    },
                ],
            ),
            Message(
                slot=slot,
                seq=3,
                role="assistant",
                timestamp=T0,
                content=[
                    {"type": "tool_use", "id": "tu-2", "name": "search", "input": {"q": "fjords"}},
                ],
            ),
        ]
    )
    Slot.objects.filter(pk=slot.pk).update(last_seq=3)
    page = admin_client.get(url("slot_change", slot.pk)).content.decode()
    assert "Tool call: weather (tu-1)" in page and "&quot;city&quot;: &quot;Oslo&quot;" in page
    assert "Tool result: tu-1 · success" in page and "Sunny, 21C" in page
    assert "Tool call: search (tu-2)" in page
    assert "{&#x27;toolUse&#x27;" not in page  # not a dict dump


@pytest.mark.parametrize(
    ("block", "shown"),
    [
        ({"toolUse": "x-not-a-dict"}, "x-not-a-dict"),
        ({"toolResult": [1234]}, "1234"),
        ({"type": "tool_result", "content": [{"toolUse": 5678}]}, "5678"),
        ({"type": "tool_use", "toolUse": SCRIPT}, escape(SCRIPT)),
    ],
)
def test_tool_blocks_of_another_shape_are_shown_as_stored(
    admin_client: Client, block: dict[str, Any], shown: str
) -> None:
    slot = make_slot(0)
    message = Message.objects.create(slot=slot, seq=1, role="user", content=[block], timestamp=T0)
    Slot.objects.filter(pk=slot.pk).update(last_seq=1, last_role="user")
    for address in (
        url("slot_change", slot.pk),
        url("message_changelist"),
        url("message_change", message.pk),
    ):
        response = admin_client.get(address)
        assert response.status_code == 200, address
        assert "<script>alert" not in response.content.decode()
    assert shown in admin_client.get(url("slot_change", slot.pk)).content.decode()


def test_content_is_always_escaped(admin_client: Client) -> None:
    slot = make_slot(
        0, agent=SCRIPT, summary=[{"role": "user", "content": [{"text": SCRIPT}]}], active=True
    )
    Message.objects.create(
        slot=slot,
        seq=1,
        role="user",
        timestamp=T0,
        content=[
            {"text": SCRIPT},
            {"toolUse": {"toolUseId": SCRIPT, "name": SCRIPT, "input": {"x": SCRIPT}}},
        ],
    )
    Slot.objects.filter(pk=slot.pk).update(last_seq=1)
    comp = log_compression(
        slot,
        input=[{"role": "user", "content": [{"text": SCRIPT}]}],
        output=[{"role": "user", "content": [{"text": SCRIPT}]}],
        error=SCRIPT,
    )
    message = Message.objects.get()
    pages = [
        admin_client.get(url("slot_change", slot.pk)),
        admin_client.get(url("slot_changelist")),
        admin_client.get(url("message_change", message.pk)),
        admin_client.get(url("message_changelist")),
        admin_client.get(url("compression_change", comp.pk)),
        admin_client.get(url("slot_summarize", slot.pk)),
    ]
    for response in pages:
        body = response.content.decode()
        assert response.status_code == 200
        assert "<script>alert" not in body, response.request["PATH_INFO"]
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in pages[0].content.decode()


# -- actions on one slot ---------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_summarize_now_asks_then_compresses(admin_client: Client) -> None:
    slot = make_slot(20)
    confirm = admin_client.get(url("slot_summarize", slot.pk))
    assert confirm.status_code == 200 and b"Compress the buffer" in confirm.content
    assert b'type="hidden" name="csrfmiddlewaretoken"' in confirm.content
    slot.refresh_from_db()
    assert not slot.active and not Compression.objects.exists()  # GET changes nothing
    done = admin_client.post(url("slot_summarize", slot.pk), follow=True)
    assert done.redirect_chain[-1][0] == url("slot_change", slot.pk)
    slot.refresh_from_db()
    assert slot.active and slot.covered_seq == 20 and slot.state == "active"
    assert Compression.objects.get().outcome == "applied"
    assert "summarized" in done.content.decode()
    fetched = texts(squad_memory.get_storage().fetch_chat_sync("u", "s", "a"))
    assert fetched[0].startswith("[Summary]") and fetched[-4:] == ["q17", "a18", "q19", "a20"]
    assert f"starts with one summary plus {len(fetched) - 1} recent messages." in (
        done.content.decode()
    )


def test_reset_buffer_deactivates_and_keeps_the_raw_history(admin_client: Client) -> None:
    slot = active_slot(12, covered=8)
    Slot.objects.filter(pk=slot.pk).update(pending_since=timezone.now(), pending_token="tok")
    assert admin_client.get(url("slot_reset", slot.pk)).status_code == 200
    admin_client.post(url("slot_reset", slot.pk))
    slot.refresh_from_db()
    assert (slot.active, slot.summary, slot.summary_length, slot.covered_seq) == (False, [], 0, 0)
    assert slot.pending_since is None and slot.pending_token == "" and slot.state == "inactive"
    assert Message.objects.filter(slot=slot).count() == 12 and slot.last_seq == 12
    fetched = texts(squad_memory.get_storage().fetch_chat_sync("u", "s", "a"))
    assert fetched == [f"{'q' if i % 2 else 'a'}{i}" for i in range(1, 13)]


def test_reset_makes_a_compression_in_flight_stale() -> None:
    slot = make_slot(10, active=True)
    Slot.objects.filter(pk=slot.pk).update(pending_since=timezone.now(), pending_token="tok")
    slot.refresh_from_db()
    snap = compression.snapshot(slot)
    assert compression.reset(slot.pk)
    store = squad_memory.get_storage()
    outcome = compression.compress(snap, compression.Claim(slot.pk, "tok", 1), store.summarizer)
    assert outcome.outcome == "stale"
    assert not Slot.objects.get(pk=slot.pk).active


def test_export_downloads_history_buffer_and_log(admin_client: Client) -> None:
    slot = active_slot(12, covered=8)
    Slot.objects.filter(pk=slot.pk).update(visible_from_seq=3)
    log_compression(slot)
    assert admin_client.get(url("slot_export", slot.pk)).status_code == 200
    response = admin_client.post(url("slot_export", slot.pk))
    assert response["Content-Disposition"] == f'attachment; filename="slot-{slot.pk}.jsonl"'
    item, *messages = jsonl(response)
    assert item["slot"]["user_id"] == "u" and item["state"] == "active"
    assert item["slot"]["buffer_tokens"] == Slot.objects.get(pk=slot.pk).buffer_tokens
    assert item["slot"]["visible_from_seq"] == 3  # messages 1 and 2 are trimmed
    assert [m["content"][0]["text"] for m in messages] == [
        f"{'q' if i % 2 else 'a'}{i}" for i in range(1, 13)
    ]
    assert [m["content"][0]["text"] for m in item["buffer"]] == [
        "SUMMARY-TEXT",
        "q9",
        "a10",
        "q11",
        "a12",
    ]
    assert item["compressions"][0]["output"][0]["content"][0]["text"] == "SUMMARY-TEXT"


def test_summarize_a_foreign_slot_without_an_active_buffer_is_refused(admin_client: Client) -> None:
    slot = make_slot(4, namespace="InMemoryChatStorage")
    response = admin_client.post(url("slot_summarize", slot.pk), follow=True)
    assert "kept by the wrapped store" in response.content.decode()
    assert not Compression.objects.exists()


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_summarize_an_active_foreign_slot_compresses_its_journal(admin_client: Client) -> None:
    slot = make_slot(8, namespace="InMemoryChatStorage", active=True)
    admin_client.post(url("slot_summarize", slot.pk))
    slot.refresh_from_db()
    assert slot.covered_seq == 8 and Compression.objects.get().outcome == "applied"
    assert not Slot.objects.filter(namespace="").exists()


def test_actions_need_post_with_a_csrf_token(admin_user: User) -> None:
    slot = make_slot(20)
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    assert client.post(url("slot_summarize", slot.pk)).status_code == 403
    assert client.post(url("slot_reset", slot.pk)).status_code == 403
    assert not Compression.objects.exists()


def test_unknown_slot_is_a_404(admin_client: Client) -> None:
    assert admin_client.get(url("slot_summarize", 999)).status_code == 404
    assert admin_client.post(url("slot_reset", 999)).status_code == 404


# -- actions on a selection --------------------------------------------------------------------
def bulk(client: Client, action: str, slots: list[Slot], confirm: bool) -> Any:
    data: dict[str, Any] = {"action": action, ACTION_CHECKBOX_NAME: [s.pk for s in slots]}
    if confirm:
        data["post"] = "yes"
    return client.post(url("slot_changelist"), data)


def test_bulk_summarize_asks_then_compresses_each(admin_client: Client) -> None:
    slots = [make_slot(10, agent="a"), make_slot(10, agent="b"), make_slot(10, agent="c")]
    confirm = bulk(admin_client, "summarize_selected", slots[:2], confirm=False)
    assert confirm.status_code == 200 and b"Compress the buffer" in confirm.content
    assert not Compression.objects.exists()
    done = bulk(admin_client, "summarize_selected", slots[:2], confirm=True)
    assert done.status_code == 302
    assert sorted(Slot.objects.filter(active=True).values_list("agent_id", flat=True)) == ["a", "b"]


def _failing(history: list[Any], keep_last: int) -> list[Any]:
    raise RuntimeError("backend down")


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_summarize_now_reports_a_raising_summarizer(admin_client: Client, settings: Any) -> None:
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "SUMMARIZER": _failing, "ON_ERROR": "raise"}
    slot = make_slot(10)
    response = admin_client.post(url("slot_summarize", slot.pk), follow=True)
    assert response.redirect_chain[-1][0] == url("slot_change", slot.pk)
    (message,) = response.context["messages"]
    assert message.level_tag == "error" and "backend down" in message.message
    assert Compression.objects.get().outcome == "failed"


def test_bulk_summarize_reports_each_failure_and_goes_on(
    admin_client: Client, settings: Any
) -> None:
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "MAX_ID_LENGTH": 20}
    slots = [make_slot(10, agent="a"), make_slot(10, agent="b" * 30), make_slot(10, agent="c")]
    response = admin_client.post(
        url("slot_changelist"),
        {
            "action": "summarize_selected",
            ACTION_CHECKBOX_NAME: [s.pk for s in slots],
            "post": "yes",
        },
        follow=True,
    )
    assert response.status_code == 200
    errors = [m.message for m in response.context["messages"] if m.level_tag == "error"]
    assert len(errors) == 1 and "b" * 30 in errors[0]
    assert sorted(Slot.objects.filter(active=True).values_list("agent_id", flat=True)) == ["a", "c"]


def test_bulk_reset_and_export(admin_client: Client) -> None:
    slots = [active_slot(12, covered=8), make_slot(4, agent="b", active=True, covered_seq=2)]
    assert bulk(admin_client, "reset_selected", slots, confirm=False).status_code == 200
    assert Slot.objects.filter(active=True).count() == 2
    bulk(admin_client, "reset_selected", slots, confirm=True)
    assert not Slot.objects.filter(active=True).exists()
    response = bulk(admin_client, "export_selected", slots, confirm=True)
    lines = jsonl(response)
    assert sum("slot" in line for line in lines) == 2 and len(lines) == 2 + 4 + 12
    assert response["Content-Disposition"] == 'attachment; filename="slots-2.jsonl"'


def test_bulk_action_on_all_filtered_slots_carries_select_across(
    admin_client: Client, settings: Any
) -> None:
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 50  # far fewer than the slots selected
    Slot.objects.bulk_create(
        [
            Slot(user_id="u", session_id=f"s{i}", agent_id="a" if i < 120 else "b", active=True)
            for i in range(130)
        ]
    )
    listing = url("slot_changelist") + "?agent_id__exact=a"
    first = Slot.objects.filter(agent_id="a").first()
    assert first is not None
    data = {"action": "reset_selected", "select_across": "1", "index": "0"}
    confirm = admin_client.post(listing, {**data, ACTION_CHECKBOX_NAME: [first.pk]})
    page = confirm.content.decode()
    assert confirm.status_code == 200 and "and 20 more slots" in page
    assert page.count('<li><a href="/admin/squad_memory/slot/') == 100
    form = page[page.index('<form method="post"') :]
    assert form.startswith(f'<form method="post" action="{escape(listing)}">')
    hidden = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form)
    assert len(hidden) < 10 and ("select_across", "1") in hidden
    fields: dict[str, list[str]] = {}
    for name, value in hidden:
        fields.setdefault(name, []).append(value)
    done = admin_client.post(listing, fields)  # what the browser sends back
    assert done.status_code == 302
    assert list(Slot.objects.filter(active=True).values_list("agent_id", flat=True)) == ["b"] * 10


# -- permissions -----------------------------------------------------------------------------------
def test_view_permission_shows_everything_but_no_action(viewer_client: Client) -> None:
    slot = active_slot()
    comp = log_compression(slot)
    listing = viewer_client.get(url("slot_changelist"))
    assert listing.status_code == 200
    assert "summarize_selected" not in listing.content.decode()
    page = viewer_client.get(url("slot_change", slot.pk))
    assert page.status_code == 200 and b"SUMMARY-TEXT" in page.content
    assert url("slot_summarize", slot.pk).encode() not in page.content
    for name in ("slot_summarize", "slot_reset", "slot_export"):
        assert viewer_client.get(url(name, slot.pk)).status_code == 403
        assert viewer_client.post(url(name, slot.pk)).status_code == 403
    assert viewer_client.post(url("slot_change", slot.pk), {"trigger_at": 3}).status_code == 403
    assert viewer_client.get(url("message_changelist")).status_code == 200
    assert viewer_client.get(url("compression_change", comp.pk)).status_code == 200
    slot.refresh_from_db()
    assert (
        slot.active
        and slot.trigger_at is None
        and not Compression.objects.exclude(pk=comp.pk).exists()
    )


def test_bulk_actions_are_refused_without_change_permission(viewer_client: Client) -> None:
    slot = active_slot()
    response = bulk(viewer_client, "reset_selected", [slot], confirm=True)
    assert response.status_code in (200, 302)
    slot.refresh_from_db()
    assert slot.active and slot.summary_length == 1


def test_without_view_permission_everything_is_403(nobody_client: Client) -> None:
    slot = active_slot()
    comp = log_compression(slot)
    for address in (
        url("slot_changelist"),
        url("slot_change", slot.pk),
        url("slot_summarize", slot.pk),
        url("message_changelist"),
        url("compression_changelist"),
        url("compression_change", comp.pk),
    ):
        assert nobody_client.get(address).status_code == 403, address


def test_change_permission_runs_actions(editor_client: Client) -> None:
    slot = active_slot()
    assert editor_client.get(url("slot_reset", slot.pk)).status_code == 200
    editor_client.post(url("slot_reset", slot.pk))
    slot.refresh_from_db()
    assert not slot.active


def test_messages_and_compressions_are_read_only(admin_client: Client) -> None:
    slot = active_slot()
    comp = log_compression(slot)
    message = Message.objects.filter(slot=slot).first()
    assert message is not None
    assert admin_client.get(url("message_add")).status_code == 403
    assert admin_client.get(url("compression_add")).status_code == 403
    assert (
        admin_client.post(url("message_change", message.pk), {"role": "assistant"}).status_code
        == 403
    )
    assert admin_client.post(url("message_delete", message.pk), {"post": "yes"}).status_code == 403
    assert admin_client.post(url("compression_delete", comp.pk), {"post": "yes"}).status_code == 403
    assert admin_client.get(url("slot_add")).status_code == 403
    assert Message.objects.filter(slot=slot).count() == 12 and Compression.objects.count() == 1
    page = admin_client.get(url("compression_change", comp.pk)).content.decode()
    assert "Before: the summarizer" in page and "SUMMARY-TEXT" in page


def test_slot_form_saves_only_the_overrides(admin_client: Client) -> None:
    slot = make_slot(4)
    Slot.objects.filter(pk=slot.pk).update(last_seq=5)  # a save landed after the form was read
    response = admin_client.post(url("slot_change", slot.pk), {"trigger_at": 6, "keep_last": 1})
    assert response.status_code == 302
    slot.refresh_from_db()
    assert (slot.trigger_at, slot.keep_last, slot.last_seq) == (6, 1, 5)
    bad = admin_client.post(url("slot_change", slot.pk), {"trigger_at": 2, "keep_last": 2})
    assert bad.status_code == 200
    assert b"keep_last (2) must be smaller than trigger_at (2)" in bad.content


@pytest.mark.parametrize(
    ("trigger_at", "keep_last", "ok"),
    [
        (0, "", False),
        (0, 0, False),
        (2, "", False),  # KEEP_LAST (2) applies
        ("", 20, False),  # TRIGGER_AT (20) applies
        (3, "", True),
        ("", 19, True),
    ],
)
def test_slot_form_checks_the_values_that_apply(
    admin_client: Client, settings: Any, trigger_at: Any, keep_last: Any, ok: bool
) -> None:
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "TRIGGER_AT": 20, "KEEP_LAST": 2}
    slot = make_slot(4)
    data = {"trigger_at": trigger_at, "keep_last": keep_last}
    response = admin_client.post(url("slot_change", slot.pk), data)
    assert response.status_code == (302 if ok else 200)
    slot.refresh_from_db()
    saved = (slot.trigger_at, slot.keep_last)
    expected = tuple(None if v == "" else v for v in (trigger_at, keep_last))
    assert saved == (expected if ok else (None, None))


def test_action_results_name_the_outcome() -> None:
    slot = make_slot(4)
    assert actions.reset(slot).ok
    Slot.objects.filter(pk=slot.pk).delete()
    assert not actions.reset(slot).ok


@pytest.mark.django_db(transaction=True)  # publishes on commit
def test_summarize_now_in_celery_mode_queues_the_compression(
    admin_client: Client, redis_queue: Any, settings: Any
) -> None:
    # 20 messages stay within the hard limit here (TRIGGER_AT is 2 in Celery's test settings).
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "MAX_BUFFER_PAIRS": 10}
    slot = make_slot(20)
    response = admin_client.post(url("slot_summarize", slot.pk), follow=True)
    assert "queued" in response.content.decode()
    assert len(queued_args(redis_queue)) == 1  # published to the broker, after the commit
    slot.refresh_from_db()
    assert slot.state == "pending" and slot.active and not Compression.objects.exists()
    page = admin_client.get(url("slot_changelist"), {"state": "pending"})
    assert [s.pk for s in page.context["cl"].result_list] == [slot.pk]


def test_slot_page_shows_the_transcript_and_the_log_only_with_their_permissions() -> None:
    slot = active_slot()
    log_compression(slot, output=[{"role": "user", "content": [{"text": "LOGGED-AFTER"}]}])
    Message.objects.filter(slot=slot, seq=1).update(content=[{"text": "RAW-ONE"}])
    pages = {}
    for name, perms in {
        "slots": ("view_slot",),
        "messages": ("view_slot", "view_message"),
        "log": ("view_slot", "view_compression"),
    }.items():
        client = Client()
        client.force_login(staff(name, *perms))
        response = client.get(url("slot_change", slot.pk) + "?page=1")
        assert response.status_code == 200
        pages[name] = response.content.decode()
    assert "RAW-ONE" not in pages["slots"] and "SUMMARY-TEXT" not in pages["slots"]
    assert "LOGGED-AFTER" not in pages["slots"] and "view compressions" in pages["slots"]
    assert "RAW-ONE" in pages["messages"] and "LOGGED-AFTER" not in pages["messages"]
    assert "LOGGED-AFTER" in pages["log"] and "RAW-ONE" not in pages["log"]


def test_the_admin_shows_invisible_characters_in_ids(admin_client: Client) -> None:
    slot = make_slot(2, user="\u200b\u200b", session="ticket-\u202e4321-gnp.exe", agent="a\u2066")
    comp = log_compression(slot)
    listing = admin_client.get(url("slot_changelist")).content.decode()
    assert (
        "ticket-&lt;U+202E&gt;4321-gnp.exe" in listing and "&lt;U+200B&gt;&lt;U+200B&gt;" in listing
    )
    assert "a&lt;U+2066&gt;" in listing and "\u202e" not in listing and "\u200b" not in listing
    for address in (url("slot_change", slot.pk), url("compression_change", comp.pk)):
        page = admin_client.get(address).content.decode()
        assert "ticket-&lt;U+202E&gt;4321-gnp.exe" in page and "\u202e" not in page, address
    messages = admin_client.get(url("message_changelist")).content.decode()
    assert "&lt;U+2066&gt;" in messages and "\u2066" not in messages


def test_export_needs_the_view_permissions_of_what_it_holds(editor_client: Client) -> None:
    slot = active_slot()
    page = editor_client.get(url("slot_change", slot.pk)).content.decode()
    assert url("slot_reset", slot.pk) in page and url("slot_export", slot.pk) not in page
    assert editor_client.get(url("slot_export", slot.pk)).status_code == 403
    assert editor_client.post(url("slot_export", slot.pk)).status_code == 403
    listing = editor_client.get(url("slot_changelist")).content.decode()
    assert "reset_selected" in listing and "export_selected" not in listing
    full = Client()
    full.force_login(staff("auditor", "change_slot", "view_message", "view_compression"))
    assert full.post(url("slot_export", slot.pk)).status_code == 200


def test_slot_list_and_page_show_the_buffers_tokens(admin_client: Client) -> None:
    slot = make_slot(2, user="tokens")
    Slot.objects.filter(pk=slot.pk).update(buffer_tokens=4321, summary_tokens=1234)
    page = admin_client.get(url("slot_changelist")).content.decode()
    assert "buffer tokens" in page.lower() and ">4321<" in page
    detail = admin_client.get(url("slot_change", slot.pk)).content.decode()
    assert "4321" in detail and "1234" in detail


def test_slot_page_edits_the_token_overrides(admin_client: Client) -> None:
    slot = make_slot(2)
    data = {"trigger_at": "", "keep_last": "", "max_buffer_pairs": "", "trigger_tokens": "500"}
    bad = admin_client.post(url("slot_change", slot.pk), {**data, "max_buffer_tokens": "100"})
    assert bad.status_code == 200
    assert "max_buffer_tokens (100) must be at least trigger_tokens (500)" in bad.content.decode()
    admin_client.post(url("slot_change", slot.pk), {**data, "max_buffer_tokens": "900"})
    slot.refresh_from_db()
    assert (slot.trigger_tokens, slot.max_buffer_tokens) == (500, 900)


def test_a_compression_page_is_titled_by_its_slot_range_and_outcome(admin_client: Client) -> None:
    slot = make_slot(42, user="alice", session="s1", agent="support")
    row = log_compression(slot, from_seq=1, to_seq=42)
    page = admin_client.get(url("compression_change", row.pk)).content.decode()
    title = re.search(r"<title>(.*?)</title>", page, re.S).group(1)  # type: ignore[union-attr]
    assert title.startswith(f"messages #1 to #42 of slot {slot.pk}: applied |"), title
    assert "1 1..42 applied" not in page


def test_raw_messages_the_summary_kept_verbatim_are_not_marked_summarized(
    admin_client: Client,
) -> None:
    slot = active_slot(12, covered=8)
    log_compression(slot, from_seq=1, to_seq=8, kept_from_seq=7)  # its output kept #7 and #8
    response = admin_client.get(url("slot_change", slot.pk))
    marked = [e.seq for e in response.context["page"].entries if e.summarized]
    assert marked == [1, 2, 3, 4, 5, 6]
    assert "(#7\u2013#8 kept verbatim in it)" in response.content.decode()


@pytest.mark.parametrize(
    ("mode", "named"), [("inline", "Inline mode"), ("tasks", "db_worker"), ("celery", "Celery")]
)
def test_the_summarize_confirmation_names_the_mode_in_use(
    admin_client: Client, settings: Any, mode: str, named: str
) -> None:
    slot = make_slot(4)
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "MODE": mode}
    page = admin_client.get(url("slot_summarize", slot.pk)).content.decode()
    assert named in page
    others = {"inline": "Inline mode", "tasks": "Tasks mode", "celery": "Celery mode"}
    assert not [m for k, m in others.items() if k != mode and m in page]


def test_the_messages_list_marks_trimmed_rows_only(admin_client: Client) -> None:
    slot = make_slot(4, visible_from_seq=3)  # messages 1 and 2 are trimmed
    page = admin_client.get(reverse("admin:squad_memory_message_changelist")).content.decode()
    assert page.count("icon-yes.svg") == 2 and "icon-no.svg" not in page
    assert slot.message_count == 4


def test_the_compression_log_breaks_the_summarizer_path_at_its_dots_only(
    admin_client: Client,
) -> None:
    log_compression(make_slot(4), summarizer="myapp.summaries.summarize")
    page = admin_client.get(reverse("admin:squad_memory_compression_changelist")).content.decode()
    assert "myapp.<wbr>summaries.<wbr>summarize" in page
    css = (Path(squad_memory.__file__).parent / "static/squad_memory/admin.css").read_text()
    assert "field-summarizer" not in css  # no overflow-wrap: anywhere for it


def test_the_slot_pages_compression_log_breaks_the_summarizer_path_at_its_dots_only(
    admin_client: Client,
) -> None:
    slot = make_slot(4)
    logged = log_compression(slot, summarizer="myapp.summaries.summarize")
    page = admin_client.get(url("slot_change", slot.pk)).content.decode()
    log = page[page.index('id="compression-log"') :]
    assert '<td class="sm-summarizer">myapp.<wbr>summaries.<wbr>summarize</td>' in log
    detail = admin_client.get(url("compression_change", logged.pk)).content.decode()
    assert "myapp.<wbr>summaries.<wbr>summarize" in detail
    css = (Path(squad_memory.__file__).parent / "static/squad_memory/admin.css").read_text()
    rule = re.search(r"\.sm-log td\.sm-summarizer \{([^}]*)\}", css)
    assert rule and "overflow-wrap: normal" in rule.group(1)  # not anywhere, as other cells


#: How the admin showed some dates (2024-06-01 12:30): not the admin's own format.
ISO_SHOWN = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d")


def test_every_date_and_time_in_the_admin_reads_one_way(
    admin_client: Client, settings: Any
) -> None:
    """List pages, detail pages and the compression log show each date and time in the
    admin's own format (DATETIME_FORMAT, in the current time zone), as Django shows its
    fields; a machine-readable ``datetime`` attribute aside."""
    settings.TIME_ZONE = "America/New_York"  # the shown times are local, not UTC
    started = timezone.now() - timedelta(hours=3, seconds=17)
    slot = active_slot(4, covered=2)
    Slot.objects.filter(pk=slot.pk).update(
        pending_since=started, retry_after=started + timedelta(minutes=5)
    )
    slot.refresh_from_db()
    logged = log_compression(slot, started_at=started, finished_at=started + timedelta(seconds=2))
    first = Message.objects.get(slot=slot, seq=1)
    times = [transcript_time(m.timestamp) for m in Message.objects.filter(slot=slot)]
    pages = {
        url("slot_changelist"): [slot.updated_at],
        url("slot_change", slot.pk): [
            slot.created_at,
            slot.updated_at,
            slot.pending_since,
            slot.retry_after,
            logged.started_at,
            *times,
        ],
        url("message_changelist"): times,
        url("message_change", first.pk): [times[0]],
        url("compression_changelist"): [logged.started_at],
        url("compression_change", logged.pk): [logged.started_at, logged.finished_at],
    }
    for address, values in pages.items():
        page = admin_client.get(address).content.decode()
        page = re.sub(r'datetime="[^"]*"', "", page)
        assert not ISO_SHOWN.findall(page), address
        for value in values:
            shown = formats.localize(timezone.template_localtime(value))
            assert escape(shown) in page, (address, shown)


def transcript_time(timestamp_ms: int) -> Any:
    from squad_memory.admin.transcript import message_time

    return message_time(timestamp_ms)
