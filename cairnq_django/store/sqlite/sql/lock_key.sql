-- Take the write lock that opens every keyed transaction (protocol 3.1, 2.6).
-- params: key (not referenced: SQLite has one lock for the whole file)

-- Already held under IMMEDIATE; otherwise taken before the key is read, so two submits cannot both see it free.
UPDATE cairnq_meta SET value = value WHERE key = 'protocol_version'
