-- Each user's last workspace backup: when it was tried and how it went, and the last that worked
-- (the admin pages and /metrics show them).
CREATE TABLE workspace_backups (
    user_id TEXT PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    attempted_at BIGINT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'failed')),
    -- Why it failed, in words for an admin; empty when it worked.
    message TEXT NOT NULL,
    succeeded_at BIGINT,
    snapshot_id TEXT,
    files BIGINT,
    bytes BIGINT
);

-- The places a backup repository was opened at: one is made (restic init) only where none was
-- ever used, so a repository that goes missing later is an error, never replaced by an empty one.
CREATE TABLE backup_repositories (
    place TEXT PRIMARY KEY,
    first_used_at BIGINT NOT NULL
);
