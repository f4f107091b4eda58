-- When a ready session with no work was parked: its slot given back (`slot_id` still names the
-- slot it resumes on), its editor frozen, its kernels kept (`domain::session`, `domain::idle`).
ALTER TABLE sessions ADD COLUMN parked_at BIGINT;
