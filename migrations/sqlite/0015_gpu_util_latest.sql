-- The GPU utilization of a session's last sample (percent of its card), beside gpu_used_mib, for
-- the per-user figures of /metrics and the pool map.
ALTER TABLE sessions ADD COLUMN gpu_util_pct BIGINT;
