-- Open one step's write transaction, holding SQLite's single write lock from the
-- start. No parameters. IMMEDIATE (not DEFERRED) so two processes installing at
-- once serialize here: the second one waits, then finds the step recorded.
BEGIN IMMEDIATE
