-- Approved images (app::domain::images): what admins allow at launch besides the configured
-- default per editor. Retired ones stay, for the sessions and audit lines that name them.
CREATE TABLE images (
    id TEXT PRIMARY KEY,
    editor TEXT NOT NULL,
    reference TEXT NOT NULL,
    label TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('approved', 'retired')),
    added_by TEXT REFERENCES users (id),
    created_at BIGINT NOT NULL,
    UNIQUE (editor, reference)
);
-- The image a session was launched with, where one was chosen (NULL: the configured default).
ALTER TABLE sessions ADD COLUMN image TEXT;
