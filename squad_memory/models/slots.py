"""Slots and their raw messages: what every save writes and every fetch reads.

A *slot* is one conversation of one agent, keyed ``(user_id, session_id, agent_id)``.
Its row carries the sequence counter and the role of its last accepted message
(so a save never reads the history) and the summary buffer as a *pointer plus a
prefix*: the last compression's output and the sequence number it covers. The
buffer is that prefix followed by the slot's messages after the pointer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from squad_memory.conf import app_settings
from squad_memory.querysets import (
    SlotQuerySet,
    SlotState,
    ago,
    needs_compression,
)
from squad_memory.validation import visible


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
    trigger_at = models.PositiveIntegerField(
        _("trigger at (pairs)"),
        null=True,
        blank=True,
        help_text=_("Overrides the storage's value."),
    )
    keep_last = models.PositiveIntegerField(
        _("keep last (pairs)"), null=True, blank=True, help_text=_("Overrides the storage's value.")
    )
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
    max_buffer_pairs = models.PositiveIntegerField(
        _("hard limit (pairs)"),
        null=True,
        blank=True,
        help_text=_("Overrides the storage's value."),
    )
    last_failed = models.BooleanField(_("last compression failed"), default=False)

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
    trigger_tokens = models.PositiveIntegerField(
        _("trigger at (tokens)"),
        null=True,
        blank=True,
        help_text=_("Overrides the storage's value."),
    )
    max_buffer_tokens = models.PositiveIntegerField(
        _("hard limit (tokens)"),
        null=True,
        blank=True,
        help_text=_("Overrides the storage's value."),
    )

    objects = SlotQuerySet.as_manager()

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
        ]

    def __str__(self) -> str:
        prefix = f"{self.namespace}:" if self.namespace else ""
        return visible(f"{prefix}{self.user_id}/{self.session_id}/{self.agent_id}")

    @property
    def message_count(self) -> int:
        """Raw messages accepted (trimmed ones included)."""
        return self.last_seq

    @property
    def buffer_length(self) -> int:
        """Length of what ``fetch_chat`` returns once the buffer is active."""
        if not self.active:
            return self.last_seq - self.visible_from_seq + 1
        return self.summary_length + self.last_seq - self.covered_seq

    @property
    def state(self) -> SlotState:
        """The summary state, judged with the settings' TRIGGER_AT and MAX_BUFFER_PAIRS."""
        return self.state_for(
            app_settings.trigger_at, app_settings.max_buffer_pairs, app_settings.max_buffer_tokens
        )

    def state_for(
        self,
        default_trigger_at: int,
        default_max_pairs: int | None,
        default_max_tokens: int | None = None,
    ) -> SlotState:
        """The summary state (the same rule as ``SlotQuerySet.in_state``)."""
        if self.is_over_limit(default_trigger_at, default_max_pairs, default_max_tokens):
            return SlotState.OVER_LIMIT
        if self.pending_since is not None:
            return SlotState.PENDING
        if self.last_failed:
            return SlotState.FAILED
        return SlotState.ACTIVE if self.active else SlotState.INACTIVE

    # -- the per-slot rules: each is stated here once ---------------------------------
    def trigger_for(self, default: int) -> int:
        """The trigger_at this slot compresses at: its override, else ``default``."""
        return self.trigger_at or default

    def trigger_tokens_for(self, default: int | None) -> int | None:
        """The token trigger this slot compresses at: its override, else ``default``."""
        return self.trigger_tokens or default

    def needs_compression(self, default_trigger: int, default_tokens: int | None) -> bool:
        """The trigger rule for this slot's buffer (``SlotQuerySet.over_threshold`` in SQL)."""
        return needs_compression(
            self.buffer_length,
            self.trigger_for(default_trigger),
            self.buffer_tokens,
            self.trigger_tokens_for(default_tokens),
            self.summary_tokens,
        )

    def keep_last_for(self, default_trigger: int, default_keep: int) -> int:
        """The slot's keep_last (its override or the default), kept below its trigger_at.

        A keep_last at or above trigger_at could never shorten the buffer, and would
        make every save call the summarizer again.
        """
        keep = self.keep_last if self.keep_last is not None else default_keep
        return max(min(keep, self.trigger_for(default_trigger) - 1), 0)

    def max_pairs_for(self, default_trigger: int, default_max_pairs: int | None) -> int:
        """The hard limit on the buffer's tail, in pairs: the override, the default, or
        three times the slot's trigger_at."""
        return self.max_buffer_pairs or default_max_pairs or 3 * self.trigger_for(default_trigger)

    def max_tokens_for(self, default_max_tokens: int | None) -> int | None:
        """The hard limit on the buffer in tokens: the override, the default, or None."""
        return self.max_buffer_tokens or default_max_tokens

    def is_over_limit(
        self,
        default_trigger: int,
        default_max_pairs: int | None,
        default_max_tokens: int | None = None,
    ) -> bool:
        """An active buffer past the hard limit, in pairs or tokens (compressions lag or fail)."""
        limit = 2 * self.max_pairs_for(default_trigger, default_max_pairs)
        tokens = self.max_tokens_for(default_max_tokens)
        over_tokens = tokens is not None and self.buffer_tokens > tokens
        return self.active and (self.last_seq - self.covered_seq > limit or over_tokens)

    @property
    def buffer_from_seq(self) -> int:
        """The first raw message of the buffer's tail (after the summary, when active)."""
        return self.covered_seq + 1 if self.active else self.visible_from_seq

    def is_trimmed(self, seq: int) -> bool:
        """A message hidden by ``max_history_size`` (still stored)."""
        return seq < self.visible_from_seq

    def claim_is_free(self, pending_timeout: float, now: datetime | None = None) -> bool:
        """No claim, or one whose lease ran out (the same rule as ``claim_free()``)."""
        now = now or timezone.now()
        if self.pending_since is None:
            return True
        if self.lease_until is None:
            return self.pending_since < ago(now, pending_timeout)
        return self.lease_until < now


class Message(models.Model):
    """One accepted raw message. Never edited; trimmed messages stay, marked by the slot."""

    slot = models.ForeignKey(
        Slot, on_delete=models.CASCADE, related_name="messages", verbose_name=_("slot")
    )
    seq = models.BigIntegerField(_("sequence number"))
    role = models.CharField(_("role"), max_length=16)
    content = models.JSONField(_("content blocks"), default=list)
    citations = models.JSONField(_("citations"), null=True, blank=True)
    timestamp = models.BigIntegerField(_("timestamp (ms)"))
    text = models.TextField(
        _("plain text"),
        default="",
        blank=True,
        help_text=_("Text of the content blocks and tool calls, extracted at save for search."),
    )
    tokens = models.IntegerField(
        _("tokens"), default=0, help_text=_("Counted once at save by TOKEN_COUNTER.")
    )

    class Meta:
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        ordering = ["slot_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["slot", "seq"], name="squad_memory_message_seq"),
        ]
        indexes = [
            models.Index(fields=["timestamp"], name="squad_memory_message_ts"),
        ]

    def __str__(self) -> str:
        return f"{self.slot_id}#{self.seq} {self.role}"

    @property
    def trimmed(self) -> bool:
        return self.slot.is_trimmed(self.seq)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "role": self.role,
            "content": self.content,
            "citations": self.citations,
            "timestamp": self.timestamp,
        }
