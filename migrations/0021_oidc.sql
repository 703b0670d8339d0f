-- Single sign-on with an OpenID Connect provider (README "Single sign-on").
--
-- A user the provider created carries the provider's issuer and subject: the
-- pair, never the username, is what a later login matches. Such a user has no
-- password (password_hash '').
ALTER TABLE users ADD COLUMN oidc_issuer text NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN oidc_subject text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX users_oidc_identity ON users (oidc_issuer, oidc_subject) WHERE oidc_subject <> '';

-- A group the provider's groups claim manages: its memberships follow the
-- provider on every login and re-check, and admins cannot edit it.
ALTER TABLE groups ADD COLUMN managed_by text NOT NULL DEFAULT '' CHECK (managed_by IN ('', 'oidc'));

-- A login in flight: written by /auth/oidc/login, consumed (deleted) exactly
-- once by /auth/oidc/callback, so a replayed state is refused on every
-- instance. The browser holds only the state, in a cookie bound to it.
CREATE TABLE oidc_logins (
    state         text PRIMARY KEY,
    nonce         text NOT NULL,
    code_verifier text NOT NULL,
    return_to     text NOT NULL DEFAULT '',
    expires_at    timestamptz NOT NULL
);
CREATE INDEX oidc_logins_expires ON oidc_logins (expires_at);

-- A ragent session that came from the provider, by the ragent token's id:
-- the provider's refresh token the re-check uses, the ID token logout hints
-- with, and when the provider was last asked.
CREATE TABLE oidc_sessions (
    token_id      text PRIMARY KEY,
    user_id       bigint NOT NULL REFERENCES users (id),
    refresh_token text NOT NULL DEFAULT '',
    id_token      text NOT NULL DEFAULT '',
    checked_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL
);
CREATE INDEX oidc_sessions_user ON oidc_sessions (user_id);
CREATE INDEX oidc_sessions_expires ON oidc_sessions (expires_at);
