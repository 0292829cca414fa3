"""Celery's tasks (``app.autodiscover_tasks()`` imports this module): ``summarize_slot``
(:mod:`squad_memory.compression.celery`) and ``sweep``, for a Celery beat entry."""

from __future__ import annotations

from celery import shared_task

from squad_memory.compression.celery import summarize_slot
from squad_memory.operations.housekeeping import sweep as run_sweep

__all__ = ["summarize_slot", "sweep"]


@shared_task(ignore_result=True, name="squad_memory.tasks.sweep")  # type: ignore[untyped-decorator]
def sweep(activate: bool = False) -> dict[str, int]:
    """Claim and dispatch every slot over the threshold with nothing pending; retention."""
    return run_sweep(activate=activate).as_dict()
