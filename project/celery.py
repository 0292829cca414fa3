"""The demo project's Celery app: ``celery -A project worker`` runs squad_memory's tasks.

Its configuration is the ``CELERY_*`` settings in ``project/settings.py``
(broker from ``CELERY_BROKER_URL``, Redis or RabbitMQ).
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
