-- One-time tickets that take an admin's browser into a user's editor on the entry origin
-- (`proxy.entry_origin`): redeemed once, within a minute, for a cookie of that origin only.
CREATE TABLE entry_tickets (
    ticket_hash TEXT PRIMARY KEY,
    admin_id TEXT NOT NULL REFERENCES users (id),
    session_id TEXT NOT NULL REFERENCES sessions (id),
    expires_at BIGINT NOT NULL
);
