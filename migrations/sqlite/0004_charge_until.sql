-- A session found dead after the server was down is charged until the last time a server was
-- watching it (the reaper lease's expiry), not for the downtime.
ALTER TABLE sessions ADD COLUMN charge_until BIGINT;
