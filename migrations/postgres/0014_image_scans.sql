-- Scanner reports posted to an image (app::domain::scan): the newest decides, by the scan
-- policy, whether the image may be approved and launched. Kept as the summary read from the
-- report (counts by severity, what has a fix, the worst findings), not the report itself.
CREATE TABLE image_scans (
    id TEXT PRIMARY KEY,
    image_id TEXT NOT NULL REFERENCES images (id),
    -- The scan's own time, where the report gives one.
    scanned_at BIGINT,
    posted_at BIGINT NOT NULL,
    posted_by TEXT REFERENCES users (id),
    -- app::domain::scan::ScanSummary as JSON.
    summary TEXT NOT NULL
);
CREATE INDEX image_scans_by_image ON image_scans (image_id, posted_at);
