-- When a page of the session last said it went out of sight (hidden behind another tab or
-- window, or closed): the idle rule then takes the page for gone at once (`domain::idle`).
ALTER TABLE sessions ADD COLUMN page_left_at BIGINT;
