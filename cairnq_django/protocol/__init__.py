"""Protocol rules with no database: bounds, payload encoding, ids, cron, error envelopes, backoff."""
