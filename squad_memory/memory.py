"""``Memory``: the one synchronous service behind every path.

Both ChatStorage classes, the API, the admin actions, the management commands
and the sweep save, fetch, compress and reset through a :class:`Memory`: a
:class:`~squad_memory.journal.Journal` (where the raw history lives) and a
:class:`~squad_memory.policy.Policy` (how its buffer is compressed). A memory
without a policy is plain raw history (``DjangoChatStorage``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from squad_memory import buffer, compression, history, sql, tokens
from squad_memory.compression import Claim, Result
from squad_memory.dispatch import Dispatcher, get_dispatcher
from squad_memory.exceptions import SummarizerError
from squad_memory.history import AppendResult, SlotKey
from squad_memory.journal import Journal
from squad_memory.messages import MessageDict, needs_compression, to_dicts
from squad_memory.models import Message, Outcome, Slot
from squad_memory.policy import Policy


@dataclass
class Saved:
    """What one save did: what was appended, and the compression it started, if any."""

    appended: AppendResult
    compression: Result | None = None
    inner: Any = None

    @property
    def slot(self) -> Slot:
        return self.appended.slot

    @property
    def rows(self) -> list[Message]:
        return self.appended.rows

    @property
    def skipped(self) -> bool:
        return self.appended.skipped


class Memory:
    """Save, fetch, compress and reset the slots of one journal under one policy."""

    def __init__(self, journal: Journal, policy: Policy | None = None) -> None:
        self.journal = journal
        self.policy = policy
        self.dispatcher: Dispatcher | None = get_dispatcher(policy) if policy else None

    @property
    def namespace(self) -> str:
        return self.journal.namespace

    def slot(self, key: SlotKey) -> Slot | None:
        return sql.select_slot(self.namespace, *key)

    # -- saving ----------------------------------------------------------------------
    def save(
        self,
        key: SlotKey,
        messages: list[Any],
        *,
        check_role: bool,
        max_history_size: int | None = None,
    ) -> Saved:
        """Store messages (``check_role``: the role rule of ``save_chat_message``).

        Raises :class:`SummarizerError` after storing when the compression this save
        started failed and the policy says ``on_error="raise"``.
        """
        dicts = to_dicts(messages)
        inner = self.journal.save(key, messages, check_role, max_history_size) if dicts else None
        appended = history.append(
            self.namespace,
            key,
            dicts,
            check_role=check_role,
            max_history_size=max_history_size,
            store_rows=self.journal.store_rows,
            claim=self._claim_on_save if self.policy else None,
        )
        saved = Saved(appended, inner=inner)
        if appended.claim:
            saved.compression = self._dispatch(appended.slot, appended.claim, "save")
        elif self.due_after(appended):
            saved.compression = self.compress_after(appended.slot)
        return saved

    def due_after(self, appended: AppendResult) -> bool:
        """Whether a save that held no row lock (one statement) left its slot due for a
        compression, judged from the slot row it returned: no query."""
        if appended.locked or self.policy is None or not appended.slot.active:
            return False
        trigger, tokens = self.policy.trigger_at, self.policy.trigger_tokens
        return compression.due(appended.slot, trigger, tokens)

    def compress_after(self, slot: Slot) -> Result | None:
        """Claim and start the compression :meth:`due_after` saw due (None: someone else
        claimed it first, or a newer save made it moot)."""
        claimed = self._claim_after(slot)
        return self._run(claimed, "save") if claimed else None

    def _claim_on_save(self, slot: Slot) -> str | None:
        """Claim a compression if the save left an active buffer over the threshold."""
        assert self.policy is not None and self.dispatcher is not None
        if not slot.active:
            return None
        lease = self.dispatcher.claim_lease_seconds
        return compression.claim_locked(
            slot,
            self.policy.trigger_at,
            lease_seconds=lease,
            trigger_tokens=self.policy.trigger_tokens,
        )

    def _claim_after(self, slot: Slot) -> Claim | None:
        """The same claim after a save that held no lock: in a short transaction of its
        own (the claim re-checks the trigger rule under the row lock)."""
        assert self.policy is not None and self.dispatcher is not None
        trigger, tokens = self.policy.trigger_at, self.policy.trigger_tokens
        lease = self.dispatcher.claim_lease_seconds
        return compression.claim(
            slot.pk,
            trigger,
            self.policy.keep_last,
            lease_seconds=lease,
            run_now=True,
            trigger_tokens=tokens,
        )

    # -- reading ---------------------------------------------------------------------
    def fetch(self, key: SlotKey) -> list[MessageDict]:
        """What ``fetch_chat`` returns: the buffer, activating it when the history is long."""
        if self.policy is None:
            return self.journal.visible(key, None)
        slot = self.slot(key)
        if slot is not None and slot.active:
            return self.current(slot)
        seed = self.journal.seed(key)
        if slot is None and seed is None:
            return []
        seen = slot.last_seq if slot is not None else 0
        if self._needs_activation(slot, seed, seen):
            slot = slot or self._create(key)
            activated = self._activate(slot, seed, seen if seed is not None else None)
            if activated is not None:
                return activated
        return seed if seed is not None else buffer.current(slot)  # type: ignore[arg-type]

    def peek(self, key: SlotKey) -> list[MessageDict]:
        """What ``fetch_chat`` shows now, without activating the buffer."""
        slot = self.slot(key)
        if slot is not None and slot.active:
            return self.current(slot)
        return self.journal.visible(key, slot)

    def current(self, slot: Slot) -> list[MessageDict]:
        """The buffer of a slot kept in the database, within its hard limit."""
        if not slot.active or self.policy is None:
            return buffer.current(slot)
        pairs = slot.max_pairs_for(self.policy.trigger_at, self.policy.max_buffer_pairs)
        return buffer.read(slot, 2 * pairs, slot.max_tokens_for(self.policy.max_buffer_tokens))

    def needs_activation(self, slot: Slot) -> bool:
        """Whether fetching this inactive slot of the ORM journal activates its buffer."""
        return self.policy is not None and self._needs_activation(slot, None, slot.last_seq)

    def visible(self, slot: Slot) -> list[MessageDict]:
        """A plain history's view of a slot: its raw rows not trimmed (``journal.visible``)."""
        return [
            {"role": r["role"], "content": r["content"], "citations": r["citations"]}
            for r in buffer.visible(slot)
        ]

    def _trigger(self, slot: Slot | None) -> int:
        assert self.policy is not None
        return slot.trigger_for(self.policy.trigger_at) if slot else self.policy.trigger_at

    def _needs_activation(
        self, slot: Slot | None, seed: list[MessageDict] | None, seen: int
    ) -> bool:
        """The trigger rule over an inactive history (a foreign store's seed is counted)."""
        assert self.policy is not None
        default = self.policy.trigger_tokens
        trigger_tokens = slot.trigger_tokens_for(default) if slot is not None else default
        if seed is None:
            length, counted = seen, slot.buffer_tokens if slot is not None else 0
        else:
            length = len(seed)
            counted = tokens.count_all(seed) if trigger_tokens is not None else 0
        return needs_compression(length, self._trigger(slot), counted, trigger_tokens)

    def _create(self, key: SlotKey) -> Slot:
        user_id, session_id, agent_id = key
        slot: Slot = Slot.objects.using(history.db_alias()).get_or_create(
            namespace=self.namespace, user_id=user_id, session_id=session_id, agent_id=agent_id
        )[0]
        return slot

    def _activate(
        self, slot: Slot, seed: list[MessageDict] | None, seen: int | None
    ) -> list[MessageDict] | None:
        """Activate and compress; None if a save moved the slot past ``seen`` meanwhile."""
        slot, claimed = self._start(slot, seed, self._trigger(slot), seen)
        if not slot.active:
            return None
        if claimed is not None:
            self._run(claimed, "activation")
            slot.refresh_from_db(using=history.db_alias())
        return self.current(slot)

    # -- compressing -----------------------------------------------------------------
    def compress_now(self, key: SlotKey) -> Result:
        """Compress a slot's buffer now, whatever its length (activating it if needed)."""
        slot = self.slot(key)
        if slot is None:
            return Result(Outcome.SKIPPED)
        return self.compress_slot(slot, None if slot.active else self.journal.seed(key))

    def compress_slot(self, slot: Slot, seed: list[MessageDict] | None = None) -> Result:
        """Compress ``slot`` now; a foreign slot's inactive buffer starts from ``seed``."""
        slot, claimed = self._start(slot, seed, None, None)
        if claimed is None:
            return Result(Outcome.ALREADY_PENDING)
        return self._run(claimed, "manual")

    def reset(self, slot_id: int) -> bool:
        """Deactivate a slot's buffer; the raw history is untouched."""
        return compression.reset(slot_id)

    def _start(
        self, slot: Slot, seed: list[MessageDict] | None, trigger: int | None, seen: int | None
    ) -> tuple[Slot, Claim | None]:
        assert self.policy is not None and self.dispatcher is not None
        return compression.activate(
            slot.pk,
            trigger,
            self.policy.keep_last,
            lease_seconds=self.dispatcher.claim_lease_seconds,
            seed=seed,
            expect_last_seq=seen,
            default_trigger=self.policy.trigger_at,
            trigger_tokens=None if trigger is None else self.policy.trigger_tokens,
        )

    def _dispatch(self, slot: Slot, token: str, trigger: str) -> Result:
        assert self.policy is not None
        keep = slot.keep_last_for(self.policy.trigger_at, self.policy.keep_last)
        return self._run(Claim(slot.pk, token, keep, slot), trigger)

    def _run(self, claimed: Claim, trigger: str) -> Result:
        assert self.policy is not None and self.dispatcher is not None
        result = self.dispatcher.dispatch(claimed, trigger=trigger)
        if result.error is not None and self.policy.on_error == "raise":
            raise SummarizerError(
                f"The summarizer {self.policy.summarizer.label} failed; the message was stored "
                f"and the buffer kept uncompressed: {result.error}"
            ) from result.error
        return result
