"""``MODE`` picks a dispatcher like a Django backend: a short name or a dotted path. The
dispatcher of docs/howto/choosing-a-mode.md runs as written."""

from __future__ import annotations

import importlib
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from squad_memory.checks import check_settings
from squad_memory.compression import Dispatcher, InlineDispatcher, dispatcher_class
from squad_memory.exceptions import ConfigurationError
from squad_memory.models import Compression, Outcome, Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from tests.celery_summarizers import fold
from tests.conftest import msg, texts

DOC = Path(__file__).resolve().parent.parent / "docs" / "howto" / "choosing-a-mode.md"
PATH = "myapp.dispatchers.ThreadDispatcher"
KEY = ("u1", "s1", "agent")


@pytest.fixture
def documented(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``myapp/dispatchers.py`` as the document writes it, importable by dotted path."""
    (code,) = re.findall(r"```python\n# myapp/dispatchers.py\n(.*?)```", DOC.read_text(), re.S)
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "dispatchers.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("myapp.dispatchers")
    yield module
    for name in ("myapp.dispatchers", "myapp"):
        sys.modules.pop(name, None)


def test_short_names_and_dotted_paths_name_dispatcher_classes(documented: ModuleType) -> None:
    assert dispatcher_class("inline") is InlineDispatcher
    assert dispatcher_class("squad_memory.compression.InlineDispatcher") is InlineDispatcher
    assert issubclass(dispatcher_class(PATH), Dispatcher)
    with pytest.raises(ConfigurationError, match="one of inline, celery, tasks or the dotted"):
        dispatcher_class("myapp.dispatchers.Missing")
    with pytest.raises(ConfigurationError, match="not a subclass"):
        dispatcher_class("squad_memory.models.Slot")


@pytest.mark.parametrize("mode", ["myapp.dispatchers.Missing", "squad_memory.models.Slot"])
def test_a_mode_that_names_no_dispatcher_is_reported(
    documented: ModuleType, settings: Any, mode: str
) -> None:
    settings.SQUAD_MEMORY = {"MODE": mode}
    assert [m.id for m in check_settings()] == ["squad_memory.E006"]


@pytest.mark.django_db(transaction=True)  # its compression runs on another thread
def test_the_documented_dispatcher_compresses_off_the_saving_thread(
    documented: ModuleType, settings: Any
) -> None:
    settings.SQUAD_MEMORY = {"MODE": PATH}
    assert check_settings() == []
    ran_on: list[str] = []

    def summarize(history: list[Any], keep_last: int) -> list[Any]:
        ran_on.append(threading.current_thread().name)
        return fold(history, keep_last)

    store = SummarizingChatStorage(DjangoChatStorage(), summarize, 2, 1, mode=PATH)
    for i in range(3):
        store.save_chat_messages_sync(*KEY, [msg("user", f"u{i}"), msg("assistant", f"a{i}")])
    store.fetch_chat_sync(*KEY)  # activation: handed to the thread
    documented._pool.submit(lambda: None).result(timeout=30)  # one thread: it is done
    assert ran_on and not any(name == threading.current_thread().name for name in ran_on)
    assert ran_on[0].startswith("compress")
    assert texts(store.fetch_chat_sync(*KEY)) == ["S(u0+a0+u1+a1)", "u2", "a2"]
    assert list(Compression.objects.values_list("trigger", "outcome")) == [("thread", "applied")]
    assert store.compress_now(*KEY).outcome == Outcome.QUEUED
    documented._pool.submit(lambda: None).result(timeout=30)
    assert Slot.objects.get().pending_token == ""
