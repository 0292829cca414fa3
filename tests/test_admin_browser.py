"""The admin in a real browser: headless Chromium, driven by Playwright, on a live server."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

import squad_memory
from squad_memory.models import Compression, Message, Slot
from tests.browser_support import ARTIFACTS, browser_fixture  # noqa: F401
from tests.conftest import msg

# Transactional: the browser's requests run on the live server's thread, which sees committed
# rows only.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]

T0 = 1_700_000_000_000


def long_active_slot() -> Slot:
    """240 raw messages; the first 230 summarized once, 10 saved since through the storage."""
    slot = Slot.objects.create(
        user_id="alice", session_id="s1", agent_id="support", last_seq=230, last_role="assistant"
    )
    Message.objects.bulk_create(
        [
            Message(
                slot=slot,
                seq=i,
                role="user" if i % 2 else "assistant",
                timestamp=T0 + i * 1000,
                content=[{"text": f"{'question' if i % 2 else 'answer'} {i}"}],
            )
            for i in range(1, 231)
        ]
    )
    store = squad_memory.get_storage()
    store.fetch_chat_sync("alice", "s1", "support")  # over the threshold: activates, compresses
    for i in range(231, 241):
        store.save_chat_message_sync(
            "alice", "s1", "support", msg("user" if i % 2 else "assistant", f"later {i}")
        )
    slot.refresh_from_db()
    assert slot.active and slot.covered_seq == 230 and slot.last_seq == 240
    return slot


def login(browser: Any, live_server: Any, scheme: str, path: str) -> Any:
    User.objects.create_superuser("operator", "op@example.com", "secret-pw")
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, color_scheme=scheme)
    page = context.new_page()
    page.goto(f"{live_server.url}/admin/login/?next={path}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "secret-pw")
    page.click("input[type=submit]")
    page.wait_for_load_state()
    return page


def busy_slots() -> Slot:
    """Slots with ids as a real app makes them, compressed a few times by the storage."""
    store = squad_memory.get_storage()
    for n in range(3):
        user, session = f"customer-{4200 + n}", f"2024-06-0{n + 1}-support-chat-evening"
        for i in range(44):
            text = f"Message {i}: the order #{1000 + i} was late, the courier left a note. " * 2
            store.save_chat_message_sync(
                user, session, "billing-and-shipping-agent", msg(("user", "assistant")[i % 2], text)
            )
        store.fetch_chat_sync(user, session, "billing-and-shipping-agent")
    return Slot.objects.order_by("pk").first()  # type: ignore[return-value]


def assert_no_sideways_scroll(page: Any) -> None:
    """Neither the page nor the list's own scroll box (the admin's ``.results``) scrolls."""
    widths = page.evaluate(
        "[document.documentElement, document.querySelector('.results')]"
        ".filter(Boolean).map(el => [el.scrollWidth, el.clientWidth])"
    )
    assert all(scroll <= client for scroll, client in widths), widths


def assert_on_screen(page: Any, selector: str, text: str) -> None:
    """The column is visible within the list's box (not behind its scroll)."""
    box = page.locator(selector, has_text=text).first.bounding_box()
    results = page.locator(".results").bounding_box()
    assert box is not None and box["x"] + box["width"] <= results["x"] + results["width"], text


def test_operator_reads_a_slot_and_summarizes_it(browser: Any, live_server: Any) -> None:
    User.objects.create_superuser("operator", "op@example.com", "secret-pw")
    slot = long_active_slot()
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})

    page.goto(f"{live_server.url}/admin/login/?next=/admin/squad_memory/slot/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "secret-pw")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    row = page.locator("#result_list tbody tr", has_text="support")
    assert "active" in row.inner_text() and "240" in row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "admin-slot-list.png"), full_page=True)

    row.locator("th a").click()
    page.wait_for_url("**/change/")
    page.wait_for_selector("#raw-history")
    assert page.locator("#raw-history .sm-msg").count() == 40  # last page: messages 201..240
    shown_range = page.locator("#raw-history .sm-range").first.inner_text()
    assert shown_range == "Messages #201\u2013#240 of 240"
    # 201..230 are covered; those the summary kept verbatim are not marked summarized.
    kept = Compression.objects.get(slot=slot).kept_from_seq
    assert kept is not None and 201 < kept <= 230
    assert page.locator("#raw-history .sm-badge-covered").count() == kept - 201 + 1  # + legend
    summary = page.locator("#buffer .sm-summary")
    assert summary.is_visible() and "covering raw messages up to #230" in summary.inner_text()
    assert f"(#{kept}\u2013#230 kept verbatim in it)" in summary.inner_text()
    before = summary.inner_text()
    assert page.locator("#buffer > .sm-messages .sm-msg").count() == 10
    assert page.locator("#compression-log tbody tr").count() == 1
    assert page.locator("#compression-log").is_visible()
    page.screenshot(path=str(ARTIFACTS / "admin-slot-page.png"), full_page=True)

    page.click("text=Summarize now")
    page.wait_for_selector(".sm-confirm")
    page.click("input[name=confirm]")
    page.wait_for_selector("#buffer .sm-summary")
    notice = page.locator(".messagelist").inner_text()
    assert "summarized; the buffer now starts with one summary plus" in notice
    after = page.locator("#buffer .sm-summary").inner_text()
    assert after != before and "covering raw messages up to #240" in after
    assert page.locator("#buffer > .sm-messages .sm-msg").count() == 0
    assert page.locator("#compression-log tbody tr").count() == 2
    page.screenshot(path=str(ARTIFACTS / "admin-slot-page-after-summarize.png"), full_page=True)
    slot.refresh_from_db()
    assert slot.covered_seq == 240 and slot.version == 2


CONTRAST = """el => {
    const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
    const lum = c => {
        const linear = v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
        const [r, g, b] = c.map(v => linear(v / 255));
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const style = getComputedStyle(el);
    const [a, b] = [lum(rgb(style.color)), lum(rgb(style.backgroundColor))].sort((x, y) => y - x);
    return (a + 0.05) / (b + 0.05);
}"""


@pytest.mark.any_database  # the layout is the same on every database
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_slot_page_reads_well_at_1400px_in_light_and_dark(
    browser: Any, live_server: Any, scheme: str
) -> None:
    slot = long_active_slot()
    ARTIFACTS.mkdir(exist_ok=True)
    page = login(browser, live_server, scheme, f"/admin/squad_memory/slot/{slot.pk}/change/")
    page.wait_for_selector("#raw-history")
    dark = page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    assert dark == (scheme == "dark")

    # The transcript comes before the slot's bookkeeping fields.
    transcript_top = page.locator("#raw-history").bounding_box()["y"]
    form_top = page.locator("#slot_form fieldset").first.bounding_box()["y"]
    assert transcript_top < form_top

    # The badges are readable on their background (WCAG AA for text: 4.5).
    for badge in ("#raw-history .sm-msg .sm-badge-covered", ".sm-legend .sm-badge-trimmed"):
        ratio = page.locator(badge).first.evaluate(CONTRAST)
        assert ratio >= 4.5, (scheme, badge, ratio)

    # The compression log fits: its outcome column is on screen, and an opened
    # before/after does not make the page scroll sideways.
    page.screenshot(path=str(ARTIFACTS / f"admin-slot-page-{scheme}.png"), full_page=True)
    outcome = page.locator("#compression-log th", has_text="outcome").bounding_box()
    assert outcome["x"] + outcome["width"] <= 1400
    page.locator("#compression-log details summary").first.click()
    assert page.locator("#compression-log .sm-before-after").first.is_visible()
    page.locator("#compression-log").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"admin-compression-log-{scheme}.png"))
    assert_no_sideways_scroll(page)
    page.context.close()


@pytest.mark.any_database  # the layout is the same on every database
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_admin_lists_fit_1400px_in_light_and_dark(
    browser: Any, live_server: Any, scheme: str, tmp_path: Any
) -> None:
    slot = busy_slots()
    page = login(browser, live_server, scheme, "/admin/squad_memory/slot/")
    page.wait_for_selector("#result_list")
    page.screenshot(path=str(tmp_path / f"slot-list-{scheme}.png"), full_page=True)
    assert_on_screen(page, "#result_list th", "Last activity")
    assert_no_sideways_scroll(page)

    page.goto(f"{live_server.url}/admin/squad_memory/compression/")
    page.screenshot(path=str(tmp_path / f"compression-log-{scheme}.png"), full_page=True)
    for column in ("duration", "outcome", "triggered by"):
        assert_on_screen(page, "#result_list th", column)
    assert_no_sideways_scroll(page)

    page.goto(f"{live_server.url}/admin/squad_memory/message/")
    page.screenshot(path=str(tmp_path / f"message-list-{scheme}.png"))
    text = page.locator("#result_list td.field-preview").first.bounding_box()
    assert text is not None and text["width"] >= 360, text  # about 60 characters a line
    assert_no_sideways_scroll(page)

    page.goto(f"{live_server.url}/admin/squad_memory/slot/{slot.pk}/change/")
    page.wait_for_selector("#compression-log")
    page.screenshot(path=str(tmp_path / f"slot-page-{scheme}.png"), full_page=True)
    page.locator("#compression-log").screenshot(path=str(tmp_path / f"slot-log-{scheme}.png"))
    started = page.locator("#compression-log tbody td").first
    assert started.evaluate("el => getComputedStyle(el).whiteSpace") == "nowrap"
    lines = "el => { const r = document.createRange(); r.selectNodeContents(el); return r.getClientRects().length; }"
    assert started.evaluate(lines) == 1  # the timestamp does not wrap
    # The summarizer's dotted path wraps after its dots only: each part on one line.
    parts = (
        "el => [...el.childNodes].filter(n => n.nodeType === Node.TEXT_NODE).map(n => {"
        " const r = document.createRange(); r.selectNodeContents(n);"
        " return r.getClientRects().length; })"
    )
    summarizer = page.locator("#compression-log td.sm-summarizer").first
    assert "." in summarizer.inner_text() and set(summarizer.evaluate(parts)) == {1}
    print(f"screenshots: {tmp_path}")
