from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SquadMemoryConfig(AppConfig):
    name = "squad_memory"
    verbose_name = _("Squad memory")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core.signals import request_started

        from squad_memory import checks  # registers the system checks

        request_started.connect(checks.warn_at_first_request)
