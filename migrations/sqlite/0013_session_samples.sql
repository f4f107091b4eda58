-- A session's readings at one a minute (the highest of the minute's samples), for the session
-- page's sparklines and the usage per day; kept for `history.retention_days`.
CREATE TABLE session_samples (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    -- The minute's start, in Unix milliseconds.
    at BIGINT NOT NULL,
    gpu_mib BIGINT,
    gpu_util_pct BIGINT,
    cpu_milli BIGINT,
    ram_mib BIGINT,
    -- 1 when the reaper saw work in the minute (a busy kernel, GPU or CPU).
    busy BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, at)
);
CREATE INDEX session_samples_at ON session_samples (at);
