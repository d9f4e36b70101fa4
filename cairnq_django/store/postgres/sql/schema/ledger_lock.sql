-- Lock the ledger for the rest of this step's transaction. No parameters.
-- EXCLUSIVE, as upstream's runners take it (protocol 1.6): migrators serialize; plain reads do not wait.
LOCK TABLE cairnq_migrations IN EXCLUSIVE MODE
