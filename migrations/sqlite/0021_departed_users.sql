-- When a deleted account's storage was removed, after its grace period: from then on the
-- deletion cannot be undone.
ALTER TABLE users ADD COLUMN purged_at BIGINT;
