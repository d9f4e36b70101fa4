-- Which of these queues are paused (docs/limits.md): asked after a draw that
-- found some queue empty, whose claim cursor may then move up to the clock
-- only if its queue was not paused (a paused queue's backlog is still there).
-- params: queues (text[])
SELECT queue FROM cairnq_django_queue_pause WHERE queue = ANY(%(queues)s::text[])
