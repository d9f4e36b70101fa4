from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CairnQConfig(AppConfig):
    name = "cairnq_django"
    label = "cairnq"
    verbose_name = _("Task queue")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Only wiring here: no queries, no threads (see CONVENTIONS 7).
        from django.utils.module_loading import autodiscover_modules

        from . import checks, signals  # noqa: F401  (registers checks and receivers)

        autodiscover_modules("tasks")
