"""Slots: one conversation of one agent, with its counters and its summary buffer.

A slot's row carries the sequence counter and its last accepted role (so a save never
reads the history) and the buffer as a pointer plus a prefix: the last compression's
output (``summary``) and the sequence number it covers (``covered_seq``); the buffer is
that prefix followed by the messages after the pointer. Each per-slot rule is a method
here, stated once; the querysets state the same rules as queries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce, Greatest, Least
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from squad_memory.conf import app_settings
from squad_memory.models.append import SlotManager
from squad_memory.rules import needs_compression, visible

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise

#: ``Slot.namespace`` of slots whose raw history is kept by ``DjangoChatStorage``.
DJANGO_NAMESPACE = ""


def _override(verbose_name: _StrOrPromise) -> models.PositiveIntegerField[int | None, int | None]:
    """A per-slot override of a storage's size (empty: the storage's value)."""
    help_text = _("Overrides the storage's value.")
    return models.PositiveIntegerField(verbose_name, null=True, blank=True, help_text=help_text)


@dataclass(frozen=True)
class Limits:
    """The sizes a buffer is compressed and cut by: a storage's values, or one slot's after
    its own overrides (:meth:`Slot.limits`)."""

    trigger_at: int = 20
    keep_last: int = 2
    #: The hard limit on the buffer's tail, in pairs (None: 3 x trigger_at).
    max_buffer_pairs: int | None = None
    #: Compress also when the buffer holds more tokens than this (None: off).
    trigger_tokens: int | None = None
    #: The hard limit in tokens (None: off).
    max_buffer_tokens: int | None = None

    @classmethod
    def from_settings(cls) -> Limits:
        s = app_settings
        return cls(
            s.trigger_at, s.keep_last, s.max_buffer_pairs, s.trigger_tokens, s.max_buffer_tokens
        )

    @property
    def max_tail(self) -> int:
        """The most messages after the summary a fetch returns (the hard limit in messages)."""
        return 2 * (self.max_buffer_pairs or 3 * self.trigger_at)


class SlotState(models.TextChoices):
    """The summary state of a slot: one table for the model, the admin filter and the API."""

    INACTIVE = "inactive", _("not active")
    ACTIVE = "active", _("active")
    PENDING = "pending", _("compression pending")
    FAILED = "failed", _("last compression failed")
    OVER_LIMIT = "over_limit", _("over its hard limit")


class SlotQuerySet(models.QuerySet["Slot"]):
    def for_key(
        self, user_id: str, session_id: str, agent_id: str, namespace: str = DJANGO_NAMESPACE
    ) -> SlotQuerySet:
        return self.filter(
            namespace=namespace, user_id=user_id, session_id=session_id, agent_id=agent_id
        )

    def _with_limits(self, limits: Limits) -> SlotQuerySet:
        """Aliases of :meth:`Slot.limits` as expressions: ``trigger``, ``trigger_tok``,
        ``max_tail``, ``max_tok``."""

        def tokens(column: str, default: int | None) -> Coalesce:
            big = models.BigIntegerField()
            return Coalesce(column, Value(default, output_field=big), output_field=big)

        trigger = Coalesce("trigger_at", Value(limits.trigger_at))
        pairs = Value(limits.max_buffer_pairs) if limits.max_buffer_pairs else trigger * 3
        return self.alias(
            trigger=trigger,
            trigger_tok=tokens("trigger_tokens", limits.trigger_tokens),
            max_tail=Coalesce("max_buffer_pairs", pairs) * 2,
            max_tok=tokens("max_buffer_tokens", limits.max_buffer_tokens),
        )

    def over_threshold(self, limits: Limits) -> SlotQuerySet:
        """Active slots over the trigger rule (:meth:`Slot.needs_compression`)."""
        return (
            self.filter(active=True)
            ._with_limits(limits)
            .alias(
                blen=F("summary_length") + F("last_seq") - F("covered_seq"),
                new=F("last_seq") - F("covered_seq"),
                new_tok=(F("buffer_tokens") - F("summary_tokens")) * 2,
                keep=Greatest(
                    Least(Coalesce("keep_last", Value(limits.keep_last)), F("trigger") - 1), 1
                ),
            )
            .filter(
                Q(blen__gt=F("trigger") * 2)
                | Q(buffer_tokens__gt=F("trigger_tok"))
                & (Q(new_tok__gt=F("trigger_tok")) | Q(new__gte=F("keep") * 2))
            )
        )

    def inactive_over_threshold(self, limits: Limits) -> SlotQuerySet:
        """Inactive slots of ``DjangoChatStorage`` whose whole history is over it."""
        return (
            self.filter(namespace=DJANGO_NAMESPACE, active=False)
            ._with_limits(limits)
            .filter(Q(last_seq__gt=F("trigger") * 2) | Q(buffer_tokens__gt=F("trigger_tok")))
        )

    def claim_free(self, now: datetime | None = None) -> SlotQuerySet:
        """Slots with no claim, or whose claim's lease ran out (:meth:`Slot.claim_is_free`)."""
        now = now or timezone.now()
        unleased = Q(lease_until__isnull=True, pending_since__lt=now - _pending_timeout())
        return self.filter(Q(pending_since__isnull=True) | Q(lease_until__lt=now) | unleased)

    def in_state(self, state: str, limits: Limits) -> SlotQuerySet:
        """Slots in one :class:`SlotState` (the rule of :meth:`Slot.state_for`)."""
        over_tokens = Q(max_tok__isnull=False) & Q(buffer_tokens__gt=F("max_tok"))
        over = Q(active=True) & (Q(tail__gt=F("max_tail")) | over_tokens)
        rest = ~over & Q(pending_since__isnull=True)
        rule = {
            SlotState.OVER_LIMIT: over,
            SlotState.PENDING: ~over & Q(pending_since__isnull=False),
            SlotState.FAILED: rest & Q(last_failed=True),
            SlotState.ACTIVE: rest & Q(last_failed=False, active=True),
            SlotState.INACTIVE: rest & Q(last_failed=False, active=False),
        }[SlotState(state)]
        return self._with_limits(limits).alias(tail=F("last_seq") - F("covered_seq")).filter(rule)


def _pending_timeout() -> timedelta:
    """A claim taken without a lease lives ``PENDING_TIMEOUT`` seconds."""
    return timedelta(seconds=app_settings.pending_timeout)


class Slot(models.Model):
    """One conversation of one agent, with its summary buffer state."""

    namespace = models.CharField(
        _("namespace"),
        max_length=64,
        blank=True,
        default="",
        help_text=_(
            "Empty for slots kept by DjangoChatStorage; names the wrapped store otherwise."
        ),
    )
    user_id = models.CharField(_("user id"), max_length=255)
    session_id = models.CharField(_("session id"), max_length=255)
    agent_id = models.CharField(_("agent id"), max_length=255)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("last activity"), auto_now=True, db_index=True)

    # Raw history bookkeeping: sequence numbers are gapless, 1..last_seq.
    last_seq = models.BigIntegerField(_("last sequence number"), default=0)
    last_role = models.CharField(_("role of the last message"), max_length=16, blank=True)
    visible_from_seq = models.BigIntegerField(
        _("visible from"),
        default=1,
        help_text=_("Messages before this sequence number were trimmed by max_history_size."),
    )

    # Summary buffer: prefix (last compression output) + messages after covered_seq.
    active = models.BooleanField(_("buffer active"), default=False)
    summary = models.JSONField(_("summary prefix"), default=list, blank=True)
    summary_length = models.IntegerField(_("summary length"), default=0)
    covered_seq = models.BigIntegerField(
        _("covered up to"),
        default=0,
        help_text=_("The last compression's input reached this sequence number."),
    )
    version = models.BigIntegerField(
        _("buffer version"), default=0, help_text=_("Bumped by every applied compression.")
    )
    trigger_at = _override(_("trigger at (pairs)"))
    keep_last = _override(_("keep last (pairs)"))
    pending_since = models.DateTimeField(
        _("compression pending since"),
        null=True,
        blank=True,
        help_text=_("Set while a compression is queued or running; at most one per slot."),
    )
    pending_token = models.CharField(_("pending token"), max_length=64, blank=True)
    lease_until = models.DateTimeField(
        _("claim lease until"),
        null=True,
        blank=True,
        help_text=_(
            "A claim not renewed by then is taken over: its process died. Renewed while the "
            "summarizer runs."
        ),
    )
    max_buffer_pairs = _override(_("hard limit (pairs)"))
    last_failed = models.BooleanField(_("last compression failed"), default=False)
    retry_after = models.DateTimeField(
        _("retry after"),
        null=True,
        blank=True,
        help_text=_("After a failed compression, no save or sweep claims another before this."),
    )

    # Token budgets: running totals kept by every save and compression (never recounted).
    buffer_tokens = models.BigIntegerField(
        _("buffer tokens"),
        default=0,
        help_text=_(
            "Tokens of the buffer: summary plus the messages after it (inactive: every stored "
            "message)."
        ),
    )
    summary_tokens = models.IntegerField(_("summary tokens"), default=0)
    trigger_tokens = _override(_("trigger at (tokens)"))
    max_buffer_tokens = _override(_("hard limit (tokens)"))

    objects = SlotManager.from_queryset(SlotQuerySet)()

    class Meta:
        verbose_name = _("slot")
        verbose_name_plural = _("slots")
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "user_id", "session_id", "agent_id"],
                name="squad_memory_slot_key",
            ),
        ]
        indexes = [
            models.Index(fields=["user_id", "session_id"], name="squad_memory_slot_session"),
            models.Index(fields=["agent_id"], name="squad_memory_slot_agent"),
            # A user's sessions list walks their slots newest first (the API's /sessions/).
            models.Index(
                fields=["namespace", "user_id", "updated_at", "id"],
                name="squad_memory_slot_activity",
            ),
        ]

    def __str__(self) -> str:
        prefix = f"{self.namespace}:" if self.namespace else ""
        return visible(f"{prefix}{self.user_id}/{self.session_id}/{self.agent_id}")

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.user_id, self.session_id, self.agent_id)

    @property
    def message_count(self) -> int:
        """Raw messages accepted (trimmed ones included)."""
        return self.last_seq

    @property
    def buffer_length(self) -> int:
        """Length of what ``fetch_chat`` returns (before a hard limit cuts it)."""
        if not self.active:
            return self.last_seq - self.visible_from_seq + 1
        return self.summary_length + self.last_seq - self.covered_seq

    @property
    def buffer_from_seq(self) -> int:
        """The first raw message of the buffer's tail (after the summary, when active)."""
        return self.covered_seq + 1 if self.active else self.visible_from_seq

    def is_trimmed(self, seq: int) -> bool:
        """A message hidden by ``max_history_size`` (still stored)."""
        return seq < self.visible_from_seq

    # -- the per-slot rules: each is stated here once ---------------------------------
    def limits(self, defaults: Limits) -> Limits:
        """The sizes this slot is compressed and cut by: its overrides over ``defaults``, with
        keep_last below trigger_at (or a compression could never shorten the buffer)."""
        own = (self.trigger_at, self.max_buffer_pairs, self.trigger_tokens, self.max_buffer_tokens)
        unchanged = 0 <= defaults.keep_last < defaults.trigger_at
        if unchanged and self.keep_last is None and not any(own):
            return defaults  # nothing to change
        trigger_at = self.trigger_at or defaults.trigger_at
        keep = self.keep_last if self.keep_last is not None else defaults.keep_last
        return replace(
            defaults,
            trigger_at=trigger_at,
            keep_last=max(min(keep, trigger_at - 1), 0),
            max_buffer_pairs=self.max_buffer_pairs or defaults.max_buffer_pairs,
            trigger_tokens=self.trigger_tokens or defaults.trigger_tokens,
            max_buffer_tokens=self.max_buffer_tokens or defaults.max_buffer_tokens,
        )

    def needs_compression(self, defaults: Limits) -> bool:
        """The trigger rule (:func:`squad_memory.rules.needs_compression`) for this slot; an
        inactive one is judged by its whole history, not the part left visible."""
        limits = self.limits(defaults)
        return needs_compression(
            self.buffer_length if self.active else self.last_seq,
            limits.trigger_at,
            self.buffer_tokens,
            limits.trigger_tokens,
            self.summary_tokens if self.active else 0,
            self.last_seq - self.covered_seq if self.active else 0,
            limits.keep_last,
        )

    def is_over_limit(self, defaults: Limits) -> bool:
        """An active buffer past its hard limit, in messages or tokens (compressions lag)."""
        limits = self.limits(defaults)
        tokens = limits.max_buffer_tokens
        over_tokens = tokens is not None and self.buffer_tokens > tokens
        return self.active and (self.last_seq - self.covered_seq > limits.max_tail or over_tokens)

    @property
    def state(self) -> SlotState:
        """The summary state, judged with the settings' sizes."""
        return self.state_for(Limits.from_settings())

    def state_for(self, defaults: Limits) -> SlotState:
        """The summary state (the rule of ``SlotQuerySet.in_state``)."""
        if self.is_over_limit(defaults):
            return SlotState.OVER_LIMIT
        if self.pending_since is not None:
            return SlotState.PENDING
        if self.last_failed:
            return SlotState.FAILED
        return SlotState.ACTIVE if self.active else SlotState.INACTIVE

    def claim_is_free(self, now: datetime | None = None) -> bool:
        """No claim, or one whose lease ran out (its process died)."""
        now = now or timezone.now()
        if self.pending_since is None:
            return True
        if self.lease_until is None:
            return self.pending_since < now - _pending_timeout()
        return self.lease_until < now

    def buffer(
        self, rows: Sequence[Mapping[str, Any]], defaults: Limits
    ) -> list[Mapping[str, Any]]:
        """The buffer from this slot's row and its rows after the pointer: the summary, then the
        rows within the hard limits. Past a limit the tail is cut to its newest rows that fit
        (the newest always stays), starting with the role that follows the summary, so roles
        still alternate; it gets at least half the token limit, even when the prefix takes
        more. So a message larger than the whole budget is shown whole while it is among the
        newest (or the pairs a compression kept verbatim), and folded into the summary once
        those have left the window (:func:`~squad_memory.rules.needs_compression`)."""
        if not self.active:
            return list(rows)
        prefix: list[Mapping[str, Any]] = list(self.summary)
        limits = self.limits(defaults)
        tail = list(rows[-limits.max_tail :])
        if limits.max_buffer_tokens is not None and self.buffer_tokens > limits.max_buffer_tokens:
            most = limits.max_buffer_tokens
            budget, fitting = max(most - self.summary_tokens, most // 2), 0
            for row in reversed(tail):
                budget -= row.get("tokens", 0)
                if budget < 0 and fitting:
                    break
                fitting += 1
            tail = tail[-fitting:]
        if 1 < len(tail) < self.last_seq - self.covered_seq:  # cut (here or by the read)
            after = prefix[-1]["role"] if prefix else "assistant"
            if tail[0]["role"] == after:
                tail = tail[1:]
        return prefix + tail
