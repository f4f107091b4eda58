-- Accounts an admin manages (app::domain::accounts): a password an admin set, or the first run
-- printed, must be changed at the next sign-in; a deleted account stays for the history that
-- names it (ledger, sessions, audit), locked and unlisted, its name kept so nobody inherits its
-- workspace.
ALTER TABLE users ADD COLUMN must_change_password BIGINT NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN deleted_at BIGINT;
