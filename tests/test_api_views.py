"""Each endpoint of the REST API does what the storage does for Python callers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

import squad_memory
from squad_memory.models import Compression, Message, Slot
from tests.api_support import (
    Users,
    assert_error_id,
    client_for,
    fill,
    make_user,
    one,
    post,
    text_of,
)
from tests.conftest import extra, msg, texts

pytestmark = pytest.mark.prepared

extra("rest_framework", "api")  # every test here talks to the REST API

pytest_plugins = ["tests.api_fixtures"]


def test_list_slots_filters_by_session_and_agent(users: Users) -> None:
    fill(users.owner, 2, "s1", "a1")
    fill(users.owner, 2, "s1", "a2")
    fill(users.owner, 2, "s2", "a1")
    client = client_for(users.owner)
    keys = lambda r: sorted((s["session_id"], s["agent_id"]) for s in r.json()["results"])  # noqa: E731
    assert keys(client.get("/api/slots/")) == [("s1", "a1"), ("s1", "a2"), ("s2", "a1")]
    assert keys(client.get("/api/slots/", {"session_id": "s1"})) == [("s1", "a1"), ("s1", "a2")]
    assert keys(client.get("/api/slots/", {"session_id": "s1", "agent_id": "a2"})) == [("s1", "a2")]


def test_list_slots_pages_with_a_cursor(users: Users) -> None:
    for i in range(5):
        fill(users.owner, 1, f"s{i}")
    client = client_for(users.owner)
    first = client.get("/api/slots/", {"page_size": 2}).json()
    assert "count" not in first and len(first["results"]) == 2
    second = client.get(first["next"]).json()
    third = client.get(second["next"]).json()
    seen = [s["session_id"] for page in (first, second, third) for s in page["results"]]
    assert seen == ["s4", "s3", "s2", "s1", "s0"] and third["next"] is None


def test_read_slot(users: Users) -> None:
    slot = fill(users.owner, 3)
    body = client_for(users.owner).get(f"/api/slots/{slot.pk}/").json()
    assert body["id"] == slot.pk and body["user_id"] == str(users.owner.pk)
    assert (
        body["message_count"] == 3 and body["state"] == "inactive" and body["last_role"] == "user"
    )
    assert body["last_failed"] is False and body["retry_after"] is None


def test_a_slot_backing_off_says_until_when(users: Users) -> None:
    """After a refused summary no save claims the slot before ``retry_after``: the API says
    when that is."""
    slot = fill(users.owner, 3)
    until = timezone.now() + timedelta(minutes=5)
    Slot.objects.filter(pk=slot.pk).update(last_failed=True, retry_after=until)
    body = client_for(users.owner).get(f"/api/slots/{slot.pk}/").json()
    assert body["state"] == "failed" and parse_datetime(body["retry_after"]) == until


def test_raw_messages_page_by_seq_both_ways(users: Users) -> None:
    slot = fill(users.owner, 7)
    client = client_for(users.owner)
    page = client.get(f"/api/slots/{slot.pk}/messages/", {"page_size": 3}).json()
    assert [m["seq"] for m in page["results"]] == [1, 2, 3]
    assert page["results"][0]["content"] == [{"text": text_of(0)}] and "count" not in page
    rest = client.get(page["next"]).json()
    assert [m["seq"] for m in rest["results"]] == [4, 5, 6]
    newest = client.get(f"/api/slots/{slot.pk}/messages/", {"ordering": "-seq", "page_size": 2})
    assert [m["seq"] for m in newest.json()["results"]] == [7, 6]


def test_raw_messages_flag_trimmed_ones(users: Users) -> None:
    storage = squad_memory.get_storage()
    uid = str(users.owner.pk)
    for i, role in enumerate(["user", "assistant", "user", "assistant"]):
        storage.save_chat_message_sync(uid, "s", "a", msg(role, f"t{i}"), max_history_size=2)
    slot = Slot.objects.get(user_id=uid)
    results = client_for(users.owner).get(f"/api/slots/{slot.pk}/messages/").json()["results"]
    assert [m["trimmed"] for m in results] == [True, True, False, False]


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_buffer_is_fetch_chat(users: Users) -> None:
    slot = fill(users.owner, 50)  # over the default trigger (20 pairs): activates on read
    body = client_for(users.owner).get(f"/api/slots/{slot.pk}/buffer/").json()
    expected = squad_memory.get_storage().fetch_chat_sync(str(users.owner.pk), "s1", "a1")
    assert [m["content"][0]["text"] for m in body["messages"]] == texts(expected)
    assert body["messages"][0]["content"][0]["text"].startswith("[Summary]")
    limited = client_for(users.owner).get(f"/api/slots/{slot.pk}/buffer/", {"max_history_size": 2})
    assert len(limited.json()["messages"]) == 2


def test_session_history_is_fetch_all_chats(users: Users) -> None:
    storage, uid = squad_memory.get_storage(), str(users.owner.pk)
    storage.save_chat_message_sync(uid, "s1", "a1", msg("user", "hi"))
    storage.save_chat_message_sync(uid, "s1", "a2", msg("assistant", "hello"))
    body = client_for(users.owner).get("/api/sessions/s1/history/").json()
    assert body["user_id"] == uid and body["session_id"] == "s1"
    assert [m["content"][0]["text"] for m in body["messages"]] == ["hi", "[a2] hello"]
    assert texts(storage.fetch_all_chats_sync(uid, "s1")) == ["hi", "[a2] hello"]


def test_session_ids_with_slashes_and_unicode(users: Users) -> None:
    storage, uid = squad_memory.get_storage(), str(users.owner.pk)
    storage.save_chat_message_sync(uid, "team/ünï", "a1", msg("user", "hi"))
    response = client_for(users.owner).get("/api/sessions/team%2F%C3%BCn%C3%AF/history/")
    assert response.status_code == 200 and len(response.json()["messages"]) == 1


def test_post_one_message_applies_the_role_rule(users: Users) -> None:
    client = client_for(users.owner)
    first = post(client, {"session_id": "s", "agent_id": "a", "message": one("user", "hi")})
    assert first.status_code == 201
    assert first.json()["skipped"] is False and first.json()["stored"][0]["seq"] == 1
    again = post(client, {"session_id": "s", "agent_id": "a", "message": one("user", "again")})
    assert (
        again.status_code == 200
        and again.json()["skipped"] is True
        and again.json()["stored"] == []
    )
    slot = Slot.objects.get(user_id=str(users.owner.pk), session_id="s")
    assert list(slot.messages.values_list("seq", flat=True)) == [1]


def test_post_batch_stores_as_given(users: Users) -> None:
    body = {
        "session_id": "s",
        "agent_id": "a",
        "messages": [one("user", "a"), one("user", "b"), one("assistant", "c")],
    }
    response = post(client_for(users.owner), body)
    assert response.status_code == 201
    assert [m["seq"] for m in response.json()["stored"]] == [1, 2, 3]
    assert response.json()["slot"]["message_count"] == 3
    expected = squad_memory.get_storage().fetch_chat_sync(str(users.owner.pk), "s", "a")
    assert texts(expected) == ["a", "b", "c"]


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_post_crossing_the_trigger_compresses_like_a_python_save(users: Users) -> None:
    slot = fill(users.owner, 42)
    client_for(users.owner).get(f"/api/slots/{slot.pk}/buffer/")  # activates the buffer
    body = {
        "session_id": "s1",
        "agent_id": "a1",
        "messages": [one("user", f"x{i}") for i in range(40)],
    }
    response = post(client_for(users.owner), body)
    assert response.status_code == 201
    assert response.json()["slot"]["version"] == 2  # activation, then this save
    assert Compression.objects.filter(slot=slot, trigger="save", outcome="applied").exists()


def test_staff_post_for_another_user(users: Users) -> None:
    body = {
        "user_id": str(users.owner.pk),
        "session_id": "s",
        "agent_id": "a",
        "message": one("user", "hi"),
    }
    assert post(client_for(users.staff), body).status_code == 201
    assert Slot.objects.get(session_id="s").user_id == str(users.owner.pk)


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_compress_now(users: Users) -> None:
    slot = fill(users.owner, 6)
    response = client_for(users.owner).post(f"/api/slots/{slot.pk}/compress/")
    assert response.status_code == 200 and response.json()["outcome"] == "applied"
    assert response.json()["slot"]["state"] == "active" and response.json()["slot"]["version"] == 1
    assert Compression.objects.get(slot=slot).trigger == "manual"


def _failing(history: list[Any], keep_last: int) -> list[Any]:
    raise RuntimeError("backend down")


def assert_summarizer_error(
    response: Any, slot: Slot, caplog: pytest.LogCaptureFixture, *, detailed: bool
) -> None:
    """A 502 with an error id of the one form (logged with the compression log row of the
    failure); the error itself for staff only."""
    body = response.json()
    assert response.status_code == 502
    failed = Compression.objects.filter(slot=slot).latest("id")
    assert failed.outcome == "failed"
    assert_error_id(body, caplog, f"compression log row {failed.pk}")
    assert ("backend down" in body["detail"]) == detailed
    assert detailed or f"error id {body['error_id']}" in body["detail"]


@pytest.mark.django_db(transaction=True)  # compresses on commit
@pytest.mark.parametrize("on_error", ["record", "raise"])
def test_compress_failure_is_502_and_logged(
    users: Users, on_error: str, caplog: pytest.LogCaptureFixture
) -> None:
    slot = fill(users.owner, 6)
    with override_settings(SQUAD_MEMORY={"SUMMARIZER": _failing, "ON_ERROR": on_error}):
        response = client_for(users.owner).post(f"/api/slots/{slot.pk}/compress/")
        assert_summarizer_error(response, slot, caplog, detailed=False)
        response = client_for(users.staff).post(f"/api/slots/{slot.pk}/compress/")
        assert_summarizer_error(response, slot, caplog, detailed=True)
    assert Compression.objects.filter(slot=slot).count() == 2


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_buffer_read_with_failing_summarizer_in_raise_mode_is_502(
    users: Users, caplog: pytest.LogCaptureFixture
) -> None:
    slot = fill(users.owner, 50)  # inactive and long: the first read starts the buffer
    client = client_for(users.owner)
    with override_settings(SQUAD_MEMORY={"SUMMARIZER": _failing, "ON_ERROR": "raise"}):
        response = client.get(f"/api/slots/{slot.pk}/buffer/")
    assert_summarizer_error(response, slot, caplog, detailed=False)
    assert len(client.get(f"/api/slots/{slot.pk}/buffer/").json()["messages"]) >= 1


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_summarizer_details_need_staff_with_view_compression(
    users: Users, caplog: pytest.LogCaptureFixture
) -> None:
    slot = fill(users.owner, 6)
    without = make_user("operator", staff=True, perms=("change_slot",))
    with override_settings(SQUAD_MEMORY={"SUMMARIZER": _failing, "ON_ERROR": "raise"}):
        response = client_for(without).post(f"/api/slots/{slot.pk}/compress/")
    assert_summarizer_error(response, slot, caplog, detailed=False)


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_post_with_failing_summarizer_in_raise_mode_keeps_the_message(
    users: Users, caplog: pytest.LogCaptureFixture
) -> None:
    slot = fill(users.owner, 41)
    client_for(users.owner).post(f"/api/slots/{slot.pk}/compress/")
    body = {
        "session_id": "s1",
        "agent_id": "a1",
        "messages": [one("user", f"x{i}") for i in range(42)],
    }
    with override_settings(SQUAD_MEMORY={"SUMMARIZER": _failing, "ON_ERROR": "raise"}):
        response = post(client_for(users.owner), body)
    assert response.status_code == 502 and "stored" in response.json()["detail"]
    assert_summarizer_error(response, slot, caplog, detailed=False)
    assert Message.objects.filter(slot=slot).count() == 83


def test_reset_buffer(users: Users) -> None:
    slot = fill(users.owner, 6)
    client = client_for(users.owner)
    client.post(f"/api/slots/{slot.pk}/compress/")
    response = client.post(f"/api/slots/{slot.pk}/reset/")
    assert response.status_code == 200 and response.json()["state"] == "inactive"
    slot.refresh_from_db()
    assert (slot.active, slot.summary, slot.covered_seq) == (False, [], 0)
    buffer = client.get(f"/api/slots/{slot.pk}/buffer/").json()
    assert [m["content"][0]["text"] for m in buffer["messages"]] == [text_of(i) for i in range(6)]


def test_session_authentication_with_csrf(users: Users) -> None:
    from rest_framework.test import APIClient

    client = APIClient(enforce_csrf_checks=True)
    client.force_login(users.owner)  # a real session cookie, as after a login
    assert client.get("/api/slots/").status_code == 200
    body = {"session_id": "s", "agent_id": "a", "message": one("user", "hi")}
    assert post(client, body).status_code == 403  # no CSRF token
    client.get("/admin/login/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    assert post(client, body, HTTP_X_CSRFTOKEN=token).status_code == 201


def test_schema_and_docs_are_served(db: Any) -> None:
    from django.test import Client

    schema = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    paths = schema.json()["paths"]
    assert set(paths) == {
        "/api/slots/",
        "/api/slots/{id}/",
        "/api/slots/{id}/messages/",
        "/api/slots/{id}/buffer/",
        "/api/slots/{id}/compress/",
        "/api/slots/{id}/reset/",
        "/api/slots/messages/",
        "/api/sessions/{session_id}/history/",
        "/api/sessions/",
        "/api/sessions/{session_id}/",
        "/api/search/",
    }
    for operations in paths.values():
        for operation in operations.values():
            assert {"401", "403"} <= set(operation["responses"]), operation["operationId"]
    assert Client().get("/api/docs/").status_code == 200


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_slots_and_buffers_show_tokens_next_to_length(users: Users) -> None:
    slot = fill(users.owner, 50)
    client = client_for(users.owner)
    body = client.get(f"/api/slots/{slot.pk}/buffer/").json()
    slot.refresh_from_db()
    assert body["buffer_length"] == slot.buffer_length
    assert body["buffer_tokens"] == slot.buffer_tokens > 0
    detail = client.get(f"/api/slots/{slot.pk}/").json()
    assert detail["buffer_tokens"] == slot.buffer_tokens
    assert detail["summary_tokens"] == slot.summary_tokens > 0


def test_the_api_root_lists_the_endpoints(users: Users) -> None:
    root = client_for(None).get("/api/")
    assert root.status_code == 200 and root["Content-Type"].startswith("application/json")
    links = root.json()
    assert links["slots"] == "http://testserver/api/slots/"
    assert {"search", "session history", "docs", "redoc", "schema"} <= set(links)
    assert client_for(users.owner).get(links["slots"]).status_code == 200


def test_the_schema_is_this_version_without_foreign_sample_urls(db: Any) -> None:
    from django.test import Client
    from drf_spectacular.settings import patched_settings

    with patched_settings({"VERSION": "0.0.0"}):  # SPECTACULAR_SETTINGS without VERSION
        reply = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert reply.json()["info"]["version"] == squad_memory.__version__
    assert "example.org" not in reply.content.decode()
    search = reply.json()["paths"]["/api/search/"]["get"]["description"]
    assert "`<mark>`" in search and search.count("<mark>") == search.count("`<mark>`")


def test_an_unknown_session_is_404_to_its_history_and_its_delete(users: Users) -> None:
    client = client_for(users.owner)
    fill(users.other, 2, session="theirs")
    for session in ("nothing-here", "theirs"):
        history = client.get(f"/api/sessions/{session}/history/")
        deleted = client.delete(f"/api/sessions/{session}/")
        assert (history.status_code, deleted.status_code) == (404, 404)
        assert history.json() == deleted.json() == {"detail": "Not found."}


def test_options_describes_each_endpoint(users: Users) -> None:
    slot = fill(users.owner, 2)
    client = client_for(users.staff)

    def options(url: str) -> dict[str, Any]:
        response = client.options(url)
        assert response.status_code == 200
        return dict(response.json())

    post = options("/api/slots/messages/")
    assert post["name"] == "Post messages" and "role rule" in post["description"]
    assert {"session_id", "agent_id", "message", "messages"} <= set(post["actions"]["POST"])
    assert "id" not in post["actions"]["POST"]  # the body's fields, not a slot's
    buffer = options(f"/api/slots/{slot.pk}/buffer/")
    assert "fetch_chat" in buffer["description"] and "actions" not in buffer
    compress = options(f"/api/slots/{slot.pk}/compress/")
    assert "Compress" in compress["description"] and "actions" not in compress  # no body
    descriptions = {
        options(url)["description"]
        for url in ("/api/slots/", "/api/sessions/", "/api/search/", "/api/slots/messages/")
    }
    assert len(descriptions) == 4


def test_not_found_reads_the_same_everywhere(users: Users) -> None:
    theirs = fill(users.other, 2)
    client = client_for(users.owner)
    for url in (
        f"/api/slots/{theirs.pk}/",
        f"/api/slots/{theirs.pk}/buffer/",
        "/api/slots/999999/messages/",
        "/api/slots/not-a-number/",
        "/api/sessions/unknown/history/",
        "/api/no-such-endpoint/",
    ):
        response = client.get(url)
        assert (response.status_code, response.json()) == (404, {"detail": "Not found."}), url
    assert client.delete("/api/sessions/unknown/").json() == {"detail": "Not found."}


def test_the_api_root_links_to_the_login_page_that_admits_every_user(users: Users) -> None:
    """The admin's login refuses a user who is not staff; DRF's, linked from the root, logs
    them in and takes them to the API (not to LOGIN_REDIRECT_URL, a 404 here)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    login = client_for(None).get("/api/").json()["login"]
    assert login == "http://testserver/api-auth/login/?next=/api/"
    get_user_model().objects.create_user("browsing-reader", password="a long passphrase")
    browser = Client()
    done = browser.post(login, {"username": "browsing-reader", "password": "a long passphrase"})
    assert done.status_code == 302 and done["Location"] == "/api/"
    assert browser.get("/api/slots/", HTTP_ACCEPT="application/json").status_code == 200


API_WITHOUT_LOGIN = "tests.api_without_login_urls"


def test_the_api_root_has_no_login_link_where_drfs_login_is_not_mounted(db: Any) -> None:
    with override_settings(ROOT_URLCONF=API_WITHOUT_LOGIN):
        links = client_for(None).get("/api/").json()
    assert "login" not in links and "slots" in links


def test_redoc_loads_a_bundle_whose_logo_is_served_here(db: Any) -> None:
    """ReDoc's bundle asks its CDN for the side menu's logo whatever its options (the page's
    Content-Security-Policy refused it); the page loads a copy that asks this server."""
    from django.contrib.staticfiles import finders
    from django.test import Client

    page = Client().get("/api/redoc/").content.decode()
    assert '<script src="/api/redoc/redoc.standalone.js">' in page
    bundle = Client().get("/api/redoc/redoc.standalone.js")
    assert bundle.status_code == 200 and bundle["Content-Type"].startswith("text/javascript")
    text = b"".join(bundle).decode() if bundle.streaming else bundle.content.decode()
    assert "cdn.redoc.ly" not in text and "Redoc.init" not in page.split("<script")[0]
    assert '"/static/squad_memory/api/redoc-logo.svg"' in text
    assert text.rstrip().endswith(
        "sourceMappingURL=/static/drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js.map"
    )
    assert finders.find("squad_memory/api/redoc-logo.svg")


def test_without_the_sidecar_redoc_loads_its_cdn_and_the_copy_is_not_found(db: Any) -> None:
    from django.test import Client, modify_settings

    with modify_settings(INSTALLED_APPS={"remove": ["drf_spectacular_sidecar"]}):
        page = Client().get("/api/redoc/").content.decode()
        missing = Client().get("/api/redoc/redoc.standalone.js")
    assert "/api/redoc/redoc.standalone.js" not in page and "redoc.standalone.js" in page
    assert missing.status_code == 404 and missing.json() == {"detail": "Not found."}
