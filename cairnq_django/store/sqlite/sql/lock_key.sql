-- Take the write lock that opens every keyed transaction (protocol 3.1, 2.6).
-- params: key (not referenced: SQLite has one lock for the whole file)
-- With transaction_mode IMMEDIATE the transaction already holds the write lock
-- and this no-op write costs nothing. Without it (a misconfigured alias) it
-- takes the lock BEFORE the key is read, so two keyed submits cannot both read
-- "free" and then collide when upgrading to write.
UPDATE cairnq_meta SET value = value WHERE key = 'protocol_version'
