-- What each API token may do, as scope names separated by spaces. Tokens made before scopes
-- existed could do everything their user could, and keep that.
ALTER TABLE api_tokens ADD COLUMN scopes TEXT NOT NULL DEFAULT 'read sessions access tokens';
