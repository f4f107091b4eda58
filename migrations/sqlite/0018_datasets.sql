-- Shared datasets (app::domain::datasets): a host folder (one server) or a claim (a cluster)
-- that every session of a permitted user finds read-only at ~/datasets/<name>.
CREATE TABLE datasets (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    host_path TEXT,
    claim TEXT,
    -- 1: every user may use it; 0: those in dataset_users.
    everyone BIGINT NOT NULL DEFAULT 0,
    added_by TEXT REFERENCES users (id),
    created_at BIGINT NOT NULL,
    CONSTRAINT datasets_name_key UNIQUE (name),
    CHECK ((host_path IS NULL AND claim IS NOT NULL) OR (host_path IS NOT NULL AND claim IS NULL))
);
CREATE TABLE dataset_users (
    dataset_id TEXT NOT NULL REFERENCES datasets (id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    PRIMARY KEY (dataset_id, user_id)
);
-- What a session's launch mounted, for its page.
CREATE TABLE session_datasets (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    PRIMARY KEY (session_id, name)
);
