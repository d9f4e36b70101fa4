-- The database clock in epoch milliseconds: PostgreSQL rows never carry a
-- process clock (protocol 2.1), so workers ask here when they need "now".
-- params: none
SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms
