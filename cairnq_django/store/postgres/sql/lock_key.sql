-- Take the key lock that opens every keyed transaction (protocol 3.1).
-- params: key
-- The lock identity must be exactly hashtextextended(key, 0): upstream SDKs take
-- the same advisory lock, so keyed operations exclude each other across SDKs.
-- Transaction-scoped, released at commit or rollback.
SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))
