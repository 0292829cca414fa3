"""Raw messages: every message a slot accepted, in order, never edited."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import F
from django.utils.translation import gettext_lazy as _


class MessageQuerySet(models.QuerySet["Message"]):
    def visible(self) -> MessageQuerySet:
        """Messages not trimmed by ``max_history_size`` (what ``fetch_chat`` may show)."""
        return self.filter(seq__gte=F("slot__visible_from_seq"))

    def trimmed(self) -> MessageQuerySet:
        """Messages hidden by ``max_history_size``: still stored, never returned by a fetch."""
        return self.filter(seq__lt=F("slot__visible_from_seq"))


class Message(models.Model):
    """One accepted raw message. Never edited; trimmed messages stay, marked by the slot."""

    # No index of its own: the unique (slot, seq) index leads with slot_id and serves every
    # lookup by slot. A second index on slot_id alone costs every insert, and let
    # PostgreSQL's planner read a slot's whole history and sort it to find the buffer's
    # newest rows (3 ms at 10,000 messages, against 0.03 ms through (slot, seq)).
    slot = models.ForeignKey(
        "squad_memory.Slot",
        on_delete=models.CASCADE,
        related_name="messages",
        verbose_name=_("slot"),
        db_index=False,
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

    objects = MessageQuerySet.as_manager()
    #: What a message shows: :meth:`as_dict`, and ``values()`` of the rows the admin reads.
    ROW_FIELDS = ("seq", "role", "content", "citations", "timestamp")

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
    def is_trimmed(self) -> bool:
        """Hidden by ``max_history_size`` (``Message.objects.trimmed()`` as a query)."""
        return bool(self.slot.is_trimmed(self.seq))

    def as_dict(self) -> dict[str, Any]:
        """The message as the dict of its :attr:`ROW_FIELDS`."""
        return {name: getattr(self, name) for name in self.ROW_FIELDS}
