-- On a cluster an editor is pre-started for one user (in their namespace, with their workspace):
-- only their launch takes it. NULL: anyone's (the one-server pool, bound to a workspace when taken).
ALTER TABLE warm_editors ADD COLUMN user_id TEXT REFERENCES users (id) ON DELETE CASCADE;
-- When the user's dashboard last asked for its data: who is about to launch.
ALTER TABLE users ADD COLUMN dashboard_seen_at BIGINT;
