-- Take the key lock that opens every keyed transaction (protocol 3.1).
-- params: key

-- Exactly hashtextextended(key, 0): upstream SDKs take the same lock; released at transaction end.
SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))
