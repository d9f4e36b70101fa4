from django.apps import AppConfig


class FaultsConfig(AppConfig):
    name = "testproject.faults"
    label = "faults"
