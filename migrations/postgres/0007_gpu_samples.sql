-- Running sums of the sampler's GPU readings per session, for the admins' usage figures:
-- readings taken (where the runtime sees the GPU), their utilization and memory summed.
ALTER TABLE sessions ADD COLUMN gpu_samples BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN gpu_util_sum BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN gpu_mib_sum BIGINT NOT NULL DEFAULT 0;
-- The usage page reads sessions by when they started.
CREATE INDEX sessions_created ON sessions (created_at);
