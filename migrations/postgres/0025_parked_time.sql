-- How long a session was parked before its latest park (`parked_at`, while parked): time with
-- its GPU slice given back, which is not charged (`domain::credits::Parked`).
ALTER TABLE sessions ADD COLUMN parked_ms BIGINT NOT NULL DEFAULT 0;
