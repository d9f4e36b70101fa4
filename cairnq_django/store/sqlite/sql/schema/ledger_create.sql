-- Create the migration ledger if absent. No parameters.
-- Runs on its own, committed, before any step: the ledger is what every later
-- step locks and consults, exactly as the upstream runners do.
CREATE TABLE IF NOT EXISTS cairnq_migrations (
    name text primary key,
    applied_at_ms integer not null
)
