-- A user's open ask for credits, one at a time (asking again replaces it): admins see it until
-- a grant answers it or one of them declines it.
ALTER TABLE users ADD COLUMN credit_request_amount BIGINT;
ALTER TABLE users ADD COLUMN credit_request_note TEXT;
ALTER TABLE users ADD COLUMN credit_request_at BIGINT;
