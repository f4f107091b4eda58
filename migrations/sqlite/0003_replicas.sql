-- Several servers may share one database: the server whose task drives a session's launch, so that
-- another server starting up leaves a launch alone while that server lives (its lease
-- `instance:<id>` in `leases`).
ALTER TABLE sessions ADD COLUMN driver TEXT;
