-- The database clock in epoch milliseconds (protocol 2.1: PostgreSQL rows carry the DB's time).
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
