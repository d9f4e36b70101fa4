-- Lock fleet-limit scopes
-- (docs/limits.md), sent before claim_limited.sql in one message: claims of the same scopes queue here, in one order.
-- params: scopes (text[]), synchronous_commit ('off' = ASYNC_CLAIM_COMMIT, null = the session's; local to the transaction)
SELECT pg_advisory_xact_lock(1667330417, hashtext(scope)),
       set_config('synchronous_commit', COALESCE(%(synchronous_commit)s::text, current_setting('synchronous_commit')), true)
FROM unnest(%(scopes)s::text[]) AS scope ORDER BY scope
