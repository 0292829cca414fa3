"""The squad_memory demo project."""

from __future__ import annotations

try:
    # Loaded with Django so that @shared_task uses this app; Celery is optional
    # (inline mode needs neither Celery nor a broker).
    from .celery import app as celery_app
except ImportError:  # pragma: no cover - Celery not installed
    celery_app = None

__all__ = ["celery_app"]
