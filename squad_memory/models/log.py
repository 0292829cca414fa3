"""The compression log: one row per compression and per failed attempt."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Outcome(models.TextChoices):
    """What one request to compress turned into. Every entry point returns one."""

    APPLIED = "applied", _("applied")
    FAILED = "failed", _("failed")
    STALE = "stale", _("stale (buffer moved on)")
    SKIPPED = "skipped", _("skipped (nothing to do)")
    QUEUED = "queued", _("queued for a worker")
    ALREADY_PENDING = "already_pending", _("already pending")
    DEFERRED = "deferred", _("deferred to the commit")
    NOT_QUEUED = "not_queued", _("not queued (broker failed)")


class Compression(models.Model):
    """Append-only log of every compression and every failed attempt."""

    Outcome = Outcome

    slot = models.ForeignKey(
        "squad_memory.Slot",
        on_delete=models.CASCADE,
        related_name="compressions",
        verbose_name=_("slot"),
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
            # The admin's log lists newest first and drills down from its first and last day.
            models.Index(fields=["started_at", "id"], name="squad_memory_comp_started"),
        ]

    def __str__(self) -> str:
        return f"messages #{self.from_seq} to #{self.to_seq} of slot {self.slot_id}: {self.outcome}"
