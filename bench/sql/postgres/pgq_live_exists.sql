-- Is any pgqueuer job still waiting or running? pgqueuer deletes a job from its
-- queue table when it logs the outcome, so an empty table means drained. No parameters.
SELECT EXISTS (SELECT 1 FROM pgqueuer)
