-- Guardrails: quotas, the queue, activity signals, warm editors and the reaper's lease.

-- Per-user overrides of the configured limits; NULL keeps the default.
CREATE TABLE user_quotas (
    user_id TEXT PRIMARY KEY REFERENCES users (id),
    max_sessions BIGINT,
    max_gpu_mib BIGINT,
    max_minutes BIGINT,
    max_disk_mib BIGINT,
    updated_at BIGINT NOT NULL
);

-- FIFO order of the queue, per slice size.
ALTER TABLE sessions ADD COLUMN queued_at BIGINT;
-- A whole-card burst holds every slot of one GPU.
ALTER TABLE sessions ADD COLUMN burst BIGINT NOT NULL DEFAULT 0;
-- Activity signals besides last_activity_at (any proxied traffic).
ALTER TABLE sessions ADD COLUMN last_api_at BIGINT;
ALTER TABLE sessions ADD COLUMN last_heartbeat_at BIGINT;
ALTER TABLE sessions ADD COLUMN last_input_at BIGINT;
ALTER TABLE sessions ADD COLUMN last_busy_at BIGINT;
ALTER TABLE sessions ADD COLUMN gpu_used_mib BIGINT;
CREATE INDEX sessions_queue ON sessions (state, slice_mib, queued_at);

-- A burst session holds several slots, so a session id may appear on more than one.
DROP INDEX slots_session_key;
CREATE INDEX slots_session ON slots (session_id);

-- Editors started ahead of demand on a free slot; a launch takes one over, with its id.
CREATE TABLE warm_editors (
    id TEXT PRIMARY KEY,
    slot_id TEXT NOT NULL REFERENCES slots (id),
    editor TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('starting', 'ready')),
    upstream TEXT,
    editor_token TEXT,
    runtime_handle TEXT,
    created_at BIGINT NOT NULL,
    CONSTRAINT warm_editors_slot_key UNIQUE (slot_id)
);

-- Who runs the reaper: one holder at a time across server replicas, until it expires.
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
