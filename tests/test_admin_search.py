"""The slot page's search box and the slot list's search over message text."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from squad_memory.models import Slot

pytestmark = pytest.mark.django_db


def slot_with(user: str, *texts: str) -> Slot:
    batch = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"text": t}]}
        for i, t in enumerate(texts)
    ]
    return Slot.objects.append((user, "s", "a"), batch).slot


def test_slot_page_search_lists_hits_that_jump_to_the_message(admin_client: Client) -> None:
    filler = [f"filler {i}" for i in range(150)]
    slot = slot_with("u", "the <b>needle</b> here", *filler, "another needle")
    url = reverse("admin:squad_memory_slot_change", args=[slot.pk])
    page = admin_client.get(url, {"q": "needle"}).content.decode()
    assert 'href="?seq=1&amp;q=needle#m-1"' in page
    assert 'href="?seq=152&amp;q=needle#m-152"' in page
    assert "the &lt;b&gt;<mark>needle</mark>&lt;/b&gt; here" in page
    assert "<b>needle</b>" not in page
    jumped = admin_client.get(url, {"seq": 152, "q": "needle"}).content.decode()
    assert 'id="m-152"' in jumped  # the page holding the hit
    assert "No message matches." in admin_client.get(url, {"q": "absent"}).content.decode()


def test_slot_list_searches_message_text(admin_client: Client) -> None:
    found = slot_with("alice", "talk about volcanoes")
    slot_with("bob", "talk about rivers")
    by_id = slot_with("volcanoes-fan", "hello")
    page = admin_client.get(reverse("admin:squad_memory_slot_changelist"), {"q": "volcanoes"})
    assert set(page.context["cl"].result_list) == {found, by_id}


@pytest.mark.parametrize(
    ("perms", "finds"), [(("view_slot",), False), (("view_slot", "view_message"), True)]
)
def test_slot_list_searches_message_text_only_with_view_message(
    client: Client, perms: tuple[str, ...], finds: bool
) -> None:
    found = slot_with("alice", "talk about volcanoes")
    staff = User.objects.create_user("viewer", password="pw", is_staff=True)
    staff.user_permissions.set(Permission.objects.filter(codename__in=perms))
    client.force_login(staff)
    page = client.get(reverse("admin:squad_memory_slot_changelist"), {"q": "volcanoes"})
    assert page.status_code == 200
    assert (found in page.context["cl"].result_list) == finds
