from __future__ import annotations

from django.apps import AppConfig


class NativeConfig(AppConfig):
    """Django ``@task`` functions the django.tasks backend tests enqueue."""

    name = "testproject.native"
    label = "native"
