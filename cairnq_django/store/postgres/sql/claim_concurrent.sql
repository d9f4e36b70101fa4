-- Fleet-limited claim of a name limited by global_concurrency alone (docs/limits.md): one call of the function the migrations create (sql/functions/claim_concurrent.sql).
-- params: name_scope, queues, name, worker_id, lease_ms, limit, concurrency, synchronous_commit
SELECT * FROM cairnq_django_claim_concurrent(%(concurrency)s::int, %(lease_ms)s::bigint, %(limit)s::int, %(name)s::text, %(name_scope)s::text, %(queues)s::text[], %(worker_id)s::text, %(synchronous_commit)s::text)
