-- Fleet-limited claim of a keyed name limited by global_concurrency alone (docs/limits.md): one call of the function the migrations create (sql/functions/claim_concurrent_keyed.sql).
-- params: name_scope, queues, name, worker_id, lease_ms, limit, concurrency, head, scan, synchronous_commit
SELECT * FROM cairnq_django_claim_concurrent_keyed(%(concurrency)s::int, %(head)s::int, %(lease_ms)s::bigint, %(limit)s::int, %(name)s::text, %(name_scope)s::text, %(queues)s::text[], %(scan)s::int, %(worker_id)s::text, %(synchronous_commit)s::text)
