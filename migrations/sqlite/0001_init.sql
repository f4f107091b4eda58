-- Times are UTC milliseconds since the epoch; credits are integer milli-credits.

CREATE TABLE users (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    password_hash TEXT,
    role TEXT NOT NULL CHECK (role IN ('user', 'admin')),
    locked BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    CONSTRAINT users_name_key UNIQUE (name)
);

CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash TEXT NOT NULL UNIQUE,
    label TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT
);

CREATE TABLE gpus (
    id TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    memory_mib BIGINT NOT NULL,
    enforced BIGINT NOT NULL,
    ordinal BIGINT NOT NULL,
    active BIGINT NOT NULL DEFAULT 1
);

CREATE TABLE slots (
    id TEXT PRIMARY KEY,
    gpu_id TEXT NOT NULL REFERENCES gpus (id),
    slice_mib BIGINT NOT NULL,
    cores_pct BIGINT NOT NULL,
    session_id TEXT,
    active BIGINT NOT NULL DEFAULT 1,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX slots_session_key ON slots (session_id);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id),
    editor TEXT NOT NULL,
    slice_mib BIGINT NOT NULL,
    duration_minutes BIGINT NOT NULL,
    price_per_hour BIGINT NOT NULL,
    slot_id TEXT,
    state TEXT NOT NULL,
    end_reason TEXT,
    detail TEXT,
    upstream TEXT,
    editor_token TEXT,
    runtime_handle TEXT,
    created_at BIGINT NOT NULL,
    ready_at BIGINT,
    ends_at BIGINT,
    ended_at BIGINT,
    last_activity_at BIGINT NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id, created_at);
CREATE INDEX sessions_state ON sessions (state);

-- The state history: one row per transition or progress step.
CREATE TABLE session_events (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    seq BIGINT NOT NULL,
    state TEXT NOT NULL,
    message TEXT NOT NULL,
    progress BIGINT NOT NULL,
    failed BIGINT NOT NULL DEFAULT 0,
    at BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- Append-only: grant, hold, charge, refund, adjust. The balance is the sum of amounts.
CREATE TABLE credit_ledger (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL REFERENCES users (id),
    kind TEXT NOT NULL CHECK (kind IN ('grant', 'hold', 'charge', 'refund', 'adjust')),
    amount BIGINT NOT NULL,
    session_id TEXT,
    note TEXT NOT NULL,
    at BIGINT NOT NULL
);
CREATE INDEX credit_ledger_user ON credit_ledger (user_id);

CREATE TABLE audit_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at BIGINT NOT NULL,
    actor_id TEXT,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL
);

CREATE TABLE http_sessions (
    id TEXT PRIMARY KEY,
    data TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
