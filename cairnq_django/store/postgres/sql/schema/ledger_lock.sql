-- Lock the ledger for the rest of this step's transaction. No parameters.
-- EXCLUSIVE mode is what the upstream runners take, so this app, upstream SDKs
-- and a second `migrate` all serialize on it: whoever waits finds the step
-- recorded. Plain reads of the ledger are not blocked.
LOCK TABLE cairnq_migrations IN EXCLUSIVE MODE
