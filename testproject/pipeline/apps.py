from django.apps import AppConfig


class PipelineConfig(AppConfig):
    name = "testproject.pipeline"
    label = "pipeline"
    verbose_name = "Demo pipeline"
