-- Files users mark for the production registry (see app::domain::promotion). The file is
-- copied aside at the request, so what an admin approves is what is pushed.
CREATE TABLE promotions (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id),
    session_id TEXT NOT NULL REFERENCES sessions (id),
    path TEXT NOT NULL,
    repository TEXT NOT NULL,
    tag TEXT NOT NULL,
    media_type TEXT NOT NULL,
    size_bytes BIGINT NOT NULL,
    sha256 TEXT NOT NULL,
    -- The session's editor image, and its digest where the runtime knows one.
    image TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'pushing', 'pushed', 'rejected', 'failed')),
    requested_at BIGINT NOT NULL,
    decided_by TEXT REFERENCES users (id),
    decided_at BIGINT,
    -- When a server began pushing it: another may take over a push that is long silent.
    claimed_at BIGINT,
    pushed_at BIGINT,
    -- The manifest's digest in the registry.
    digest TEXT,
    -- Why it was rejected, or why the push failed.
    message TEXT
);
CREATE INDEX promotions_user ON promotions (user_id, requested_at);
CREATE INDEX promotions_state ON promotions (state, claimed_at);
