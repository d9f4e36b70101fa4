-- Step 0001_init.sql: the three protocol tables, the first indexes and the meta
-- rows (protocol 1.1-1.5, 1.8). No parameters. Each object only if absent, so upstream-built databases keep theirs.
-- Indexes start in their first shapes (0008, 0010 change them); "-- statement:" lines split the statements.

-- statement: tasks; column order, types, defaults and checks are the protocol's
CREATE TABLE IF NOT EXISTS cairnq_tasks (
    id text primary key,
    name text not null,
    queue text not null default 'default',
    status text not null check (status in ('queued', 'running', 'succeeded', 'failed', 'canceled')),
    payload text not null check (json_valid(payload)),
    result text check (result is null or json_valid(result)),
    error text check (error is null or json_valid(error)),
    metadata text not null default '{}' check (json_valid(metadata)),
    progress real,
    message text,
    attempt integer not null default 0,
    max_attempts integer not null default 3,
    priority integer not null default 0,
    worker_id text,
    lease_until_ms integer,
    run_at_ms integer not null,
    cancel_requested_at_ms integer,
    parent_id text,
    root_id text,
    correlation_id text,
    created_at_ms integer not null,
    updated_at_ms integer not null,
    completed_at_ms integer
)

-- statement: claim index, original shape (rebuilt by 0008)
CREATE INDEX IF NOT EXISTS cairnq_tasks_claim_idx
    ON cairnq_tasks (queue, status, priority DESC, created_at_ms)

-- statement: status index (dropped again by 0010)
CREATE INDEX IF NOT EXISTS cairnq_tasks_status_idx ON cairnq_tasks (status)

-- statement: name filter index
CREATE INDEX IF NOT EXISTS cairnq_tasks_name_idx ON cairnq_tasks (name)

-- statement: root filter index
CREATE INDEX IF NOT EXISTS cairnq_tasks_root_idx ON cairnq_tasks (root_id)

-- statement: correlation filter index
CREATE INDEX IF NOT EXISTS cairnq_tasks_correlation_idx ON cairnq_tasks (correlation_id)

-- statement: business keys; the cascade lives in the database because upstream
-- purge deletes task rows with plain SQL. No index on task_id (upstream has none).
CREATE TABLE IF NOT EXISTS cairnq_task_keys (
    key text primary key,
    task_id text not null references cairnq_tasks(id) on delete cascade,
    created_at_ms integer not null,
    updated_at_ms integer not null
)

-- statement: protocol metadata
CREATE TABLE IF NOT EXISTS cairnq_meta (
    key text primary key,
    value text not null
)

-- statement: meta rows, each only if its key is absent (an existing value wins)
INSERT INTO cairnq_meta (key, value)
VALUES ('protocol_version', '1'), ('schema_version', '1')
ON CONFLICT (key) DO NOTHING
