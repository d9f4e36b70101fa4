from django.contrib import admin
from django.urls import path

from cairnq_django.metrics import queue_metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics/queues", queue_metrics, name="cairnq-queue-metrics"),
]
