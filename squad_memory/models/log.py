"""The compression log, and the answers kept for Idempotency-Key retries."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from squad_memory.models.slots import Slot
from squad_memory.querysets import Outcome


class Compression(models.Model):
    """Append-only log of every compression and every failed attempt."""

    Outcome = Outcome

    slot = models.ForeignKey(
        Slot, on_delete=models.CASCADE, related_name="compressions", verbose_name=_("slot")
    )
    started_at = models.DateTimeField(_("started"))
    finished_at = models.DateTimeField(_("finished"))
    duration_ms = models.IntegerField(_("duration (ms)"))
    from_seq = models.BigIntegerField(_("covered from"))
    to_seq = models.BigIntegerField(_("covered up to"))
    input = models.JSONField(
        _("input buffer"),
        default=list,
        help_text=_(
            "The whole input, or with 'by reference' only a summary prefix no earlier row holds."
        ),
    )
    output = models.JSONField(
        _("output"),
        null=True,
        blank=True,
        help_text=_("With 'by reference', only the messages the summarizer wrote."),
    )
    by_reference = models.BooleanField(
        _("by reference"),
        default=False,
        help_text=_(
            "The input is the previous compression's output (or the stored prefix) followed "
            "by the raw messages from_seq..to_seq; the output is the written messages "
            "followed by the raw messages kept_from_seq..to_seq."
        ),
    )
    previous = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("previous compression"),
    )
    kept_from_seq = models.BigIntegerField(_("kept verbatim from"), null=True, blank=True)
    summarizer = models.CharField(_("summarizer"), max_length=255)
    outcome = models.CharField(_("outcome"), max_length=16, choices=Outcome.choices)
    error = models.TextField(_("error"), blank=True)
    trigger = models.CharField(_("triggered by"), max_length=32, default="save")
    attempt = models.PositiveIntegerField(_("attempt"), default=1)

    class Meta:
        verbose_name = _("compression")
        verbose_name_plural = _("compression log")
        ordering = ["slot_id", "started_at", "id"]
        indexes = [
            models.Index(fields=["slot", "started_at"], name="squad_memory_comp_slot"),
            models.Index(fields=["outcome"], name="squad_memory_comp_outcome"),
        ]

    def __str__(self) -> str:
        return f"{self.slot_id} {self.from_seq}..{self.to_seq} {self.outcome}"


class IdempotencyKey(models.Model):
    """The answer to a post sent with an ``Idempotency-Key`` header, replayed on its retries.

    One row per requesting account and key, written in the transaction that stores the
    messages, so a retry finds either nothing stored or the stored messages and their
    answer. Rows older than ``IDEMPOTENCY_TTL`` are deleted by the sweep.
    """

    user = models.CharField(
        _("user"), max_length=255, help_text=_("Primary key of the requesting account.")
    )
    key = models.CharField(_("idempotency key"), max_length=255)
    request_hash = models.CharField(
        _("request hash"),
        max_length=64,
        help_text=_("SHA-256 of the request's method, path and body."),
    )
    status = models.PositiveSmallIntegerField(_("response status"))
    body = models.JSONField(_("response body"))
    created_at = models.DateTimeField(_("created"))

    class Meta:
        verbose_name = _("idempotency key")
        verbose_name_plural = _("idempotency keys")
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="squad_memory_idem_user_key"),
        ]
        indexes = [
            models.Index(fields=["created_at"], name="squad_memory_idem_created"),
        ]

    def __str__(self) -> str:
        return f"{self.user}:{self.key}"
