-- Take the fleet-limit scopes' transaction locks, in one order everywhere (docs/limits.md). Sent in one
-- message with claim_limited.sql: claims of the same scopes queue here, then each reads what the last committed.
-- params: scopes (text[])
SELECT pg_advisory_xact_lock(1667330417, hashtext(scope)) FROM unnest(%(scopes)s::text[]) AS scope ORDER BY scope
