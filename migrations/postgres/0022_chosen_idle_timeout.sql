-- The idle timeout a person chose at launch, in milliseconds, within the bounds an admin set
-- for its size (`idle.min_timeout_seconds`…); NULL: the size's default.
ALTER TABLE sessions ADD COLUMN idle_timeout_ms BIGINT;
