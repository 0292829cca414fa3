"""The model layer's rules: slot states, compression outcomes, and the slot queryset."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import models
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

if TYPE_CHECKING:
    from squad_memory.models import Slot  # noqa: F401

#: ``Slot.namespace`` of slots whose raw history is kept by :class:`DjangoChatStorage`.
DJANGO_NAMESPACE = ""


def needs_compression(
    buffer_length: int,
    trigger_at: int,
    buffer_tokens: int = 0,
    trigger_tokens: int | None = None,
    summary_tokens: int = 0,
) -> bool:
    """The trigger rule (``SlotQuerySet.over_threshold`` states it in SQL).

    A buffer longer than ``trigger_at`` pairs is compressed; so is one holding more than
    ``trigger_tokens`` tokens (when set) whose messages after the summary make at least
    half of that: a summary that alone fills the budget is folded again only after
    half a budget of new messages, never on every save.
    """
    new_tokens = buffer_tokens - summary_tokens
    over_tokens = (
        trigger_tokens is not None
        and buffer_tokens > trigger_tokens
        and 2 * new_tokens > trigger_tokens
    )
    return buffer_length > trigger_at * 2 or over_tokens


def ago(now: datetime, seconds: float) -> datetime:
    return now - timedelta(seconds=seconds)


class SlotState(models.TextChoices):
    """The summary state of a slot: one table for the model, the admin filter and the API."""

    INACTIVE = "inactive", _("not active")
    ACTIVE = "active", _("active")
    PENDING = "pending", _("compression pending")
    FAILED = "failed", _("last compression failed")
    OVER_LIMIT = "over_limit", _("over its hard limit")


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


class SlotQuerySet(models.QuerySet["Slot"]):
    def for_key(
        self, user_id: str, session_id: str, agent_id: str, namespace: str = ""
    ) -> SlotQuerySet:
        return self.filter(
            namespace=namespace, user_id=user_id, session_id=session_id, agent_id=agent_id
        )

    def with_trigger(self, default_trigger_at: int) -> SlotQuerySet:
        """Alias ``trigger``: the slot's own trigger_at, or ``default_trigger_at``."""
        return self.alias(trigger=Coalesce("trigger_at", Value(default_trigger_at)))

    def with_trigger_tokens(self, default_trigger_tokens: int | None) -> SlotQuerySet:
        """Alias ``trigger_tok``: the slot's own trigger_tokens, or the default (NULL: off)."""
        default = Value(default_trigger_tokens, output_field=models.BigIntegerField())
        big = models.BigIntegerField()
        return self.alias(trigger_tok=Coalesce("trigger_tokens", default, output_field=big))

    def over_threshold(
        self, default_trigger_at: int, default_trigger_tokens: int | None = None
    ) -> SlotQuerySet:
        """Active slots over the trigger rule (:func:`needs_compression`): more than
        ``2 * trigger_at`` messages, or more than ``trigger_tokens`` tokens."""
        buffer_len = F("summary_length") + F("last_seq") - F("covered_seq")
        return (
            self.filter(active=True)
            .with_trigger(default_trigger_at)
            .with_trigger_tokens(default_trigger_tokens)
            .alias(blen=buffer_len)
            .alias(new_tok=(F("buffer_tokens") - F("summary_tokens")) * 2)
            .filter(
                Q(blen__gt=F("trigger") * 2)
                | Q(buffer_tokens__gt=F("trigger_tok"), new_tok__gt=F("trigger_tok"))
            )
        )

    def inactive_over_threshold(
        self, default_trigger_at: int, default_trigger_tokens: int | None = None
    ) -> SlotQuerySet:
        """Inactive slots of :class:`DjangoChatStorage` whose whole history is over it."""
        return (
            self.filter(namespace=DJANGO_NAMESPACE, active=False)
            .with_trigger(default_trigger_at)
            .with_trigger_tokens(default_trigger_tokens)
            .filter(Q(last_seq__gt=F("trigger") * 2) | Q(buffer_tokens__gt=F("trigger_tok")))
        )

    def claim_free(self, pending_timeout: float, now: datetime | None = None) -> SlotQuerySet:
        """Slots with no claim, or whose claim's lease ran out (its process died).

        A claim without a lease (taken before leases existed) lives ``pending_timeout``.
        """
        now = now or timezone.now()
        unleased_expired = Q(lease_until__isnull=True, pending_since__lt=ago(now, pending_timeout))
        return self.filter(
            Q(pending_since__isnull=True) | Q(lease_until__lt=now) | unleased_expired
        )

    def with_limit(
        self,
        default_trigger_at: int,
        default_max_pairs: int | None,
        default_max_tokens: int | None = None,
    ) -> SlotQuerySet:
        """Alias ``over``: True where the buffer is past the slot's hard limit (pairs or
        tokens)."""
        trigger = Coalesce("trigger_at", Value(default_trigger_at))
        default = Value(default_max_pairs) if default_max_pairs else trigger * 3
        limit = Coalesce("max_buffer_pairs", default) * 2
        big = models.BigIntegerField()
        max_tokens = Coalesce(
            "max_buffer_tokens", Value(default_max_tokens, output_field=big), output_field=big
        )
        over_tokens = Q(max_tok__isnull=False) & Q(buffer_tokens__gt=F("max_tok"))
        over = Q(active=True) & (Q(tail__gt=limit) | over_tokens)
        return self.alias(tail=F("last_seq") - F("covered_seq"), max_tok=max_tokens).alias(
            over=models.ExpressionWrapper(over, output_field=models.BooleanField())
        )

    def in_state(
        self,
        state: str,
        default_trigger_at: int = 20,
        default_max_pairs: int | None = None,
        default_max_tokens: int | None = None,
    ) -> SlotQuerySet:
        """Slots in one :class:`SlotState` (the same rule as :meth:`Slot.state_for`)."""
        over = Q(over=True)
        pending = ~over & Q(pending_since__isnull=False)
        rest = ~over & Q(pending_since__isnull=True)
        limits = (default_trigger_at, default_max_pairs, default_max_tokens)
        return self.with_limit(*limits).filter(
            {
                SlotState.OVER_LIMIT: over,
                SlotState.PENDING: pending,
                SlotState.FAILED: rest & Q(last_failed=True),
                SlotState.ACTIVE: rest & Q(last_failed=False, active=True),
                SlotState.INACTIVE: rest & Q(last_failed=False, active=False),
            }[SlotState(state)]
        )
