-- The OpenID Connect identity an account signs in with ("<issuer>|<subject>"); none for local
-- accounts. A provider's user finds their account by it, never by name.
ALTER TABLE users ADD COLUMN oidc_subject TEXT;
CREATE UNIQUE INDEX users_oidc_subject_key ON users (oidc_subject);
