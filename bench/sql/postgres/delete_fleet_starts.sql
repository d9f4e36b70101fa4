-- Empty cairnq-django's fleet start log (docs/limits.md) before a fleet measurement. No parameters.
DELETE FROM cairnq_django_fleet_start
