"""``Memory``: the one synchronous service behind both storage classes and every edge.

A :class:`Memory` is a :class:`Journal` (where the raw history lives: squad_memory's
own rows, or an agent-squad store beside them) and, for a summarizing storage, a
:class:`~squad_memory.compression.Policy`. The API, the admin, the management
commands and the sweep save, fetch, compress and reset through it.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Literal

from agent_squad.types import ConversationMessage
from asgiref.sync import async_to_sync
from django.db import transaction
from django.db.models import F, Q

from squad_memory.compression import Claim, Policy, Result, activate, claim, due, get_dispatcher
from squad_memory.conf import app_settings
from squad_memory.exceptions import SummarizerError
from squad_memory.messages import MessageDict, block_text, to_dicts, to_messages
from squad_memory.models import (
    DJANGO_NAMESPACE,
    Appended,
    Message,
    Outcome,
    Slot,
    SlotKey,
    SlotQuerySet,
)
from squad_memory.models.idempotency import (
    Answer,
    check_key,
    once,
    request_hash,
    storage_owner,
)
from squad_memory.rules import count_all, needs_compression
from squad_memory.threads import database, for_slot, unrepeatable

Rows = Sequence[Mapping[str, Any]]
#: Where a page of a session's history ends: slot id -> the seq its older messages end before.
Before = Mapping[int, int]
View = Literal["buffer", "visible"]


def _slots() -> SlotQuerySet:
    """Slots on the database every read a write depends on uses (never a replica)."""
    return Slot.objects.using(Slot.objects.write_db())


class Journal:
    """The raw history is squad_memory's own rows (``DjangoChatStorage``)."""

    namespace = DJANGO_NAMESPACE
    #: Rows are stored for every message (a foreign store's slot: only while active).
    rows_while_inactive = True

    def save(self, key: SlotKey, messages: list[Any], single: bool, size: int | None) -> Any:
        """Hand the raw messages to the store that keeps the history; its answer."""
        return None

    def seed(self, key: SlotKey) -> list[MessageDict] | None:
        """The history a new buffer starts from: None means the slot's own rows."""
        return None

    def fetch_all(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        """Every agent's visible messages of a session merged by time (stable), each slot's
        in its own order; an assistant message's content becomes one block ``[agent_id]
        <its first block>``. (Concurrent saves stamp their time before they take the slot's
        lock, so a slot's timestamps may step back: its order is its sequence, never the
        clock's.) Of each slot, at most its ``FETCH_ALL_LIMIT`` newest: sequence numbers
        are gapless, so those are the rows past ``last_seq - FETCH_ALL_LIMIT``, a range of
        the (slot, seq) index however long the history."""
        rows = Message.objects.using(Slot.objects.write_db()).filter(
            slot__namespace=self.namespace, slot__user_id=user_id, slot__session_id=session_id
        )
        newest = app_settings.fetch_all_limit
        if newest is not None:
            rows = rows.filter(seq__gt=F("slot__last_seq") - newest)
        values = rows.visible().order_by("slot_id", "seq").values(*_MERGED, "slot__agent_id")
        return to_messages([_with_agent_prefix(row) for row in _merged(values)])

    def history(
        self, user_id: str, session_id: str, size: int, before: Before | None = None
    ) -> tuple[list[ConversationMessage], dict[int, int]]:
        """A page of :meth:`fetch_all`'s merged history (every visible message, whatever
        ``FETCH_ALL_LIMIT``), newest first: the ``size`` newest messages before ``before``
        (None: the newest of all), oldest first, and where the page before it ends ({}:
        nothing older). A position maps each slot to the sequence number its older messages
        end before; slots it does not name (an agent that joined since) are left out, so a
        walk never repeats a message. Two statements, each reading at most ``size`` rows a
        slot."""
        slots = _slots().filter(namespace=self.namespace, user_id=user_id, session_id=session_id)
        ranges, agents = {}, {}
        for pk, agent, first, last in slots.values_list(
            "pk", "agent_id", "visible_from_seq", "last_seq"
        ):
            end = last + 1 if before is None else min(before.get(pk, first), last + 1)
            if end > first:
                ranges[pk], agents[pk] = (first, max(first, end - size), end), agent
        if not ranges:
            return [], {}
        where = functools.reduce(
            operator.or_,
            (Q(slot_id=pk, seq__gte=low, seq__lt=end) for pk, (_, low, end) in ranges.items()),
        )
        rows = Message.objects.using(Slot.objects.write_db()).filter(where)
        values = rows.order_by("slot_id", "seq").values(*_MERGED, "seq")
        page = list(_merged(values))[-size:]
        ends = {pk: end for pk, (_, _, end) in ranges.items()}
        for row in page:
            ends[row["slot_id"]] = min(ends[row["slot_id"]], row["seq"])
            row["slot__agent_id"] = agents[row["slot_id"]]
        older = {pk: end for pk, end in ends.items() if end > ranges[pk][0]}
        return to_messages([_with_agent_prefix(row) for row in page]), older


#: The columns :func:`_merged` and :func:`_with_agent_prefix` read of a message.
_MERGED = ("role", "content", "citations", "timestamp", "slot_id")


def _merged(values: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows ordered by slot, then seq, merged by time (stable), each slot's kept in order."""
    slots = [list(one) for _, one in itertools.groupby(values, key=itemgetter("slot_id"))]
    return heapq.merge(*slots, key=itemgetter("timestamp"))


def _with_agent_prefix(row: Mapping[str, Any]) -> MessageDict:
    content = row["content"] or []
    if content and row["role"] == "assistant":
        content = [{"text": f"[{row['slot__agent_id']}] {block_text(content[0])}"}]
    return {"role": row["role"], "content": content, "citations": None}


class ForeignJournal(Journal):
    """An agent-squad store keeps the history; squad_memory keeps the slot's counters and,
    once the buffer is active, its own tail rows. Every call into the store's async API
    is made here."""

    rows_while_inactive = False

    def __init__(self, store: Any, namespace: str) -> None:
        self.store = store
        self.namespace = namespace

    def call(self, method: str, *args: Any) -> Any:
        return async_to_sync(getattr(self.store, method))(*args)

    def save(self, key: SlotKey, messages: list[Any], single: bool, size: int | None) -> Any:
        unrepeatable()  # the store has the messages once this returns
        if single:
            return self.call("save_chat_message", *key, messages[0], size)
        return self.call("save_chat_messages", *key, messages, size)

    def seed(self, key: SlotKey) -> list[MessageDict]:
        # Some stores take no size argument (DynamoDB's): the whole history.
        return to_dicts(list(self.call("fetch_chat", *key) or []), check_size=False)

    def fetch_all(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        """The store's own answer, untouched (``FETCH_ALL_LIMIT`` bounds squad_memory's rows;
        what a store reads is its own)."""
        return list(self.call("fetch_all_chats", user_id, session_id) or [])

    def history(
        self, user_id: str, session_id: str, size: int, before: Before | None = None
    ) -> tuple[list[ConversationMessage], dict[int, int]]:
        """Pages cut from the store's ``fetch_all_chats`` answer (squad_memory keeps no rows
        of an inactive slot): a position is ``{0: n}``, the page ends before its n-th message
        (counted from the oldest, so a message stored meanwhile shifts nothing). The store
        reads the whole session for each page."""
        answer = self.fetch_all(user_id, session_id)
        end = len(answer) if before is None else min(before.get(0, 0), len(answer))
        start = max(0, end - size)
        return answer[start:end], ({0: start} if start else {})


@contextmanager
def _locked_slot(key: SlotKey, namespace: str) -> Iterator[None]:
    """A transaction holding the slot's row locked (created if new): one save of a foreign
    store's slot at a time, in any process, calls the store and then writes the slot's rows."""
    alias = Slot.objects.write_db()
    with transaction.atomic(using=alias):
        user_id, session_id, agent_id = key
        Slot.objects.using(alias).select_for_update().get_or_create(
            namespace=namespace, user_id=user_id, session_id=session_id, agent_id=agent_id
        )
        yield


@dataclass
class Saved:
    """What one save did: what was appended, the compression it started, the inner answer."""

    appended: Appended
    compression: Result | None = None
    inner: Any = None
    #: A compression the save claimed and left to its async caller to run.
    claimed: Claim | None = None
    #: A retry with an idempotency key: the first save's rows, nothing stored this time.
    replayed: bool = False

    @property
    def slot(self) -> Slot:
        return self.appended.slot

    @property
    def rows(self) -> list[Message]:
        return self.appended.rows

    @property
    def skipped(self) -> bool:
        return self.appended.skipped


def _answer_of(saved: Saved) -> Answer:
    """What a keyed save keeps for its retries: the slot and the sequence numbers of the
    rows it stored (a few numbers, never the conversation)."""
    slot, rows = saved.slot.pk, saved.rows
    seqs = [rows[0].seq, rows[-1].seq] if rows else []
    return Answer(
        200 if saved.skipped else 201,
        {"slot": slot, "seqs": seqs, "skipped": saved.skipped},
        slot=slot,
    )


class Memory:
    """Save, fetch, compress and reset the slots of one journal under one policy; without
    a policy, a plain raw history (``DjangoChatStorage``)."""

    def __init__(self, journal: Journal, policy: Policy | None = None) -> None:
        self.journal = journal
        self.policy = policy
        self.dispatcher = get_dispatcher(policy) if policy is not None else None

    @property
    def namespace(self) -> str:
        return self.journal.namespace

    # -- saving ----------------------------------------------------------------------
    def save(
        self,
        key: SlotKey,
        messages: list[Any],
        *,
        check_role: bool,
        max_history_size: int | None,
        compress: bool = True,
        read_view: bool = True,
        idempotency_key: str | None = None,
    ) -> Saved:
        """Store messages (``check_role``: the role rule of ``save_chat_message``), then
        start the compression they made due, if any (``compress=False``: outside a
        transaction, leave it claimed in ``Saved.claimed``, for an async caller;
        ``read_view``: the save also reads the rows :meth:`answer` returns).
        ``idempotency_key``: store once per key and slot (:meth:`_store_once`).

        Raises :class:`SummarizerError` after storing when that compression failed and
        the policy says ``on_error="raise"``.
        """
        dicts = to_dicts(messages)
        if idempotency_key is None:
            saved = self._store(key, messages, dicts, check_role, max_history_size, read_view)
        else:
            saved = self._store_once(
                idempotency_key, key, messages, dicts, check_role, max_history_size, read_view
            )
        if saved.replayed:
            return saved  # the first save started what it made due
        policy, dispatcher, appended = self.policy, self.dispatcher, saved.appended
        if policy and dispatcher and appended.rows and due(appended.slot, policy.limits):
            lease = dispatcher.claim_lease_seconds
            claimed = claim(appended.slot.pk, policy.limits, lease_seconds=lease, run_now=True)
            if claimed is not None:
                saved.compression, saved.claimed = self._start(claimed, "save", compress)
        return saved

    def _store(
        self,
        key: SlotKey,
        messages: list[Any],
        dicts: list[MessageDict],
        check_role: bool,
        max_history_size: int | None,
        read_view: bool,
    ) -> Saved:
        """The store of :meth:`save`: the journal's, then squad_memory's rows and counters."""
        foreign = dicts and not self.journal.rows_while_inactive  # the store and rows in step
        with _locked_slot(key, self.namespace) if foreign else nullcontext():
            inner = (
                self.journal.save(key, messages, check_role, max_history_size) if dicts else None
            )
            appended = Slot.objects.append(
                key,
                dicts,
                namespace=self.namespace,
                check_role=check_role,
                max_history_size=max_history_size,
                rows_while_inactive=self.journal.rows_while_inactive,
                view=None if not read_view else "visible" if self.policy is None else "buffer",
                newest=self._newest(),
            )
        return Saved(appended, inner=inner)

    def _store_once(
        self,
        idempotency_key: str,
        key: SlotKey,
        messages: list[Any],
        dicts: list[MessageDict],
        check_role: bool,
        max_history_size: int | None,
        read_view: bool,
    ) -> Saved:
        """:meth:`_store` once per key and slot, as the API's ``Idempotency-Key`` (the key,
        the messages and the save's answer committed together): a retry with the same
        messages stores nothing and gets the first save's rows; with others,
        :class:`IdempotencyKeyReused`."""
        check_key(idempotency_key)
        kind = "save_chat_message" if check_role else "save_chat_messages"
        body = {"messages": dicts, "max_history_size": max_history_size}
        digest = request_hash(kind, self.namespace, body)
        stored: list[Saved] = []

        def write() -> Answer:
            stored.append(
                self._store(key, messages, dicts, check_role, max_history_size, read_view)
            )
            return _answer_of(stored[0])

        owner = storage_owner(self.namespace, key)
        answer = once(owner, idempotency_key, digest, write)
        return self._replayed(key, answer.body) if answer.replayed else stored[0]

    def _replayed(self, key: SlotKey, body: Mapping[str, Any]) -> Saved:
        """The first save's :class:`Saved` again, from its stored answer (its rows read back;
        none of a foreign store's inactive slot, whose rows the store keeps)."""
        slot = _slots().filter(pk=body["slot"]).first() if body["slot"] is not None else None
        if slot is None:  # an empty batch made no slot
            user_id, session_id, agent_id = key
            slot = Slot(
                namespace=self.namespace,
                user_id=user_id,
                session_id=session_id,
                agent_id=agent_id,
            )
        first, last = body["seqs"] or (0, -1)
        rows = Message.objects.using(Slot.objects.write_db()).filter(
            slot_id=slot.pk, seq__gte=first, seq__lte=last
        )
        appended = Appended(slot, list(rows.order_by("seq")), skipped=body["skipped"])
        return Saved(appended, replayed=True)

    async def asave(
        self,
        key: SlotKey,
        messages: list[Any],
        *,
        check_role: bool,
        max_history_size: int | None,
        idempotency_key: str | None = None,
    ) -> Rows:
        """:meth:`save` and :meth:`answer` for an async caller: the statements on a database
        thread, a compression the save made due in this loop (see ``squad_memory.threads``)."""
        saved, rows = await for_slot(
            key,
            self._save_and_answer,
            key,
            messages,
            check_role,
            max_history_size,
            idempotency_key,
        )
        if saved.claimed is not None:
            saved.compression = await self._arun(saved.claimed, "save")
            rows = await database(self.answer, saved, key)
        assert rows is not None
        return rows

    def _save_and_answer(
        self,
        key: SlotKey,
        messages: list[Any],
        check_role: bool,
        size: int | None,
        idempotency_key: str | None = None,
    ) -> tuple[Saved, Rows | None]:
        saved = self.save(
            key,
            messages,
            check_role=check_role,
            max_history_size=size,
            compress=False,
            idempotency_key=idempotency_key,
        )
        return saved, None if saved.claimed is not None else self.answer(saved, key)

    def answer(self, saved: Saved, key: SlotKey) -> Rows:
        """What a save returns: the conversation as the save left it (read by the save's
        own statement, unless a compression applied since changed it)."""
        if saved.inner is not None and not saved.slot.active:  # a foreign store's answer
            inner = saved.inner if isinstance(saved.inner, list) else []
            return to_dicts(inner, check_size=False)
        rows = saved.appended.view()
        changed = saved.compression is not None and saved.compression.applied
        if rows is None or changed or self._truncated(saved.slot, rows):
            return self.current(key) if self.policy else self._read(key, "visible")[1]
        if self.policy is None or not saved.slot.active:
            return rows
        return saved.slot.buffer(rows, self.policy.limits)

    # -- reading ---------------------------------------------------------------------
    def fetch(self, key: SlotKey) -> Rows:
        """What ``fetch_chat`` returns: the buffer, activating it when the history is long."""
        return self._fetch(key, compress=True)[0]

    async def afetch(self, key: SlotKey) -> Rows:
        """:meth:`fetch` for an async caller (the summarizer, if any, as in :meth:`asave`)."""
        rows, claimed = await for_slot(key, self._fetch, key, False)
        if claimed is None:
            return rows
        await self._arun(claimed, "activation")
        return await database(self.current, key)

    def _fetch(self, key: SlotKey, compress: bool) -> tuple[Rows, Claim | None]:
        """:meth:`fetch`; ``compress=False``: an activation's compression left claimed."""
        if self.policy is None:
            return self._read(key, "visible")[1], None
        slot, rows = self._read(key)
        if slot is not None and slot.active:
            return slot.buffer(rows, self.policy.limits), None
        seed = self.journal.seed(key)
        if slot is None and seed is None:
            return [], None
        if self._needs_activation(slot, seed):
            if slot is None:
                user_id, session_id, agent_id = key
                slot, _ = _slots().get_or_create(
                    namespace=self.namespace,
                    user_id=user_id,
                    session_id=session_id,
                    agent_id=agent_id,
                )
            active, claimed = self._activate(slot, seed, compress)
            if claimed is not None:
                return [], claimed
            if active:
                return self.current(key), None
        return (seed if seed is not None else rows), None

    def current(self, key: SlotKey) -> Rows:
        """What ``fetch_chat`` shows now, without activating the buffer."""
        slot, rows = self._read(key)
        if slot is not None and slot.active and self.policy is not None:
            return slot.buffer(rows, self.policy.limits)
        seed = self.journal.seed(key)
        return seed if seed is not None else rows

    def _newest(self) -> int | None:
        """How many rows of a view a read takes: as many as the hard limit lets a fetch
        return (the storage's; a slot with a larger one of its own is read again)."""
        return self.policy.limits.max_tail if self.policy is not None else None

    def _truncated(self, slot: Slot, rows: Rows) -> bool:
        """Whether a read of the storage's hard limit cut rows the slot's own limit keeps."""
        newest = self._newest()
        if self.policy is None or newest is None or len(rows) < newest:
            return False
        return slot.limits(self.policy.limits).max_tail > newest

    def _read(self, key: SlotKey, start: View = "buffer") -> tuple[Slot | None, Rows]:
        """The slot and its view's rows (one statement)."""
        newest = self._newest() if start == "buffer" else None
        slot, rows = Slot.objects.read(key, namespace=self.namespace, start=start, newest=newest)
        if slot is not None and start == "buffer" and self._truncated(slot, rows):
            assert self.policy is not None
            wanted = slot.limits(self.policy.limits).max_tail
            return Slot.objects.read(key, namespace=self.namespace, newest=wanted)
        return slot, rows

    def _needs_activation(self, slot: Slot | None, seed: list[MessageDict] | None) -> bool:
        """The trigger rule over an inactive history (a foreign store's seed is counted)."""
        assert self.policy is not None
        limits = slot.limits(self.policy.limits) if slot is not None else self.policy.limits
        if seed is None:
            return slot is not None and slot.needs_compression(self.policy.limits)
        counted = count_all(seed) if limits.trigger_tokens is not None else 0
        return needs_compression(len(seed), limits.trigger_at, counted, limits.trigger_tokens)

    def _activate(
        self, slot: Slot, seed: list[MessageDict] | None, compress: bool
    ) -> tuple[bool, Claim | None]:
        """Activate and compress (``compress=False``: the compression left claimed); False if
        a save moved the slot meanwhile."""
        assert self.policy is not None and self.dispatcher is not None
        slot, claimed = activate(
            slot.pk,
            self.policy.limits,
            lease_seconds=self.dispatcher.claim_lease_seconds,
            seed=seed,
            expect_last_seq=slot.last_seq if seed is not None else None,
        )
        if claimed is not None:
            _, claimed = self._start(claimed, "activation", compress)
        return slot.active, claimed

    # -- compressing -----------------------------------------------------------------
    def compress_now(self, key: SlotKey) -> Result:
        """Compress a slot's buffer now, whatever its length (activating it if needed)."""
        slot = _slots().for_key(*key, namespace=self.namespace).first()
        if slot is None:
            return Result(Outcome.SKIPPED)
        return self.compress_slot(slot, None if slot.active else self.journal.seed(key))

    def compress_slot(self, slot: Slot, seed: list[MessageDict] | None = None) -> Result:
        """Compress ``slot`` now; a foreign slot's inactive buffer starts from ``seed``."""
        assert self.policy is not None and self.dispatcher is not None
        _, claimed = activate(
            slot.pk,
            self.policy.limits,
            lease_seconds=self.dispatcher.claim_lease_seconds,
            seed=seed,
            force=True,
        )
        if claimed is None:
            return Result(Outcome.ALREADY_PENDING)
        return self._run(claimed, "manual")

    def _start(
        self, claimed: Claim, trigger: str, compress: bool
    ) -> tuple[Result | None, Claim | None]:
        """Run ``claimed`` now (or on the commit of the transaction open), or, with
        ``compress=False`` and no transaction open, hand it back for an async caller."""
        if compress or transaction.get_connection(Slot.objects.write_db()).in_atomic_block:
            return self._run(claimed, trigger), None
        return None, claimed

    def _run(self, claimed: Claim, trigger: str) -> Result:
        assert self.dispatcher is not None
        return self._checked(self.dispatcher.dispatch(claimed, trigger=trigger))

    async def _arun(self, claimed: Claim, trigger: str) -> Result:
        assert self.dispatcher is not None
        return self._checked(await self.dispatcher.astart(claimed, trigger))

    def _checked(self, result: Result) -> Result:
        """``result``, or :class:`SummarizerError` for a failure under ``on_error="raise"``."""
        assert self.policy is not None
        if result.error is not None and self.policy.on_error == "raise":
            raise SummarizerError(
                f"The summarizer {self.policy.summarizer.label} failed; the message was stored "
                f"and the buffer kept uncompressed: {result.error}"
            ) from result.error
        return result
