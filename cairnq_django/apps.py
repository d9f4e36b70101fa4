from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _

from .store.sqlite.connection import open_immediate


class CairnQConfig(AppConfig):
    name = "cairnq_django"
    label = "cairnq"
    verbose_name = _("Task queue")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Only wiring here: no queries and no threads, so every management
        # command (including migrate on an empty database) can start.
        # checks imports the models, which load only once the registry is ready.
        from . import checks, signals  # noqa: F401  (registers checks and receivers)

        # SQLite without a transaction_mode: write transactions take the lock at BEGIN.
        connection_created.connect(open_immediate, dispatch_uid="cairnq_sqlite_immediate")

        autodiscover_modules("tasks")
