"""The answers kept for ``Idempotency-Key`` retries of the API's posts."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class IdempotencyKey(models.Model):
    """The answer to a post sent with an ``Idempotency-Key`` header, replayed on its retries.

    One row per requesting account and key, written in the transaction that stores the
    messages. The sweep deletes rows older than ``IDEMPOTENCY_TTL``; a row goes with its
    slot (the answer holds the messages' text), so a retry after that is a new request.
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
    slot = models.ForeignKey(
        "squad_memory.Slot",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("slot"),
        help_text=_("The slot the answered post stored into."),
    )

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
