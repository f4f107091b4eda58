-- An admin's explicit, audited and expiring way into one user's editor through the proxy.
CREATE TABLE editor_grants (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    admin_id TEXT NOT NULL REFERENCES users (id),
    granted_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, admin_id)
);
