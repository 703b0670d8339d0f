-- API keys let machines act as a user without a password (README "API keys").
-- Only the SHA-256 of the key is stored; prefix is its first characters, kept
-- so people can tell their keys apart. A key is live while revoked_at is null
-- and expires_at (if any) is in the future; the row stays after revocation so
-- a revoked key is never mistaken for an unknown one in logs.
CREATE TABLE api_keys (
    id           bigint PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES users (id),
    name         text NOT NULL,
    prefix       text NOT NULL,
    key_hash     bytea NOT NULL UNIQUE,
    scopes       jsonb NOT NULL,       -- ["chat","search","ingest","read"], a subset
    kb_ids       jsonb,                -- null: every knowledge base the owner reads
    expires_at   timestamptz,
    last_used_at timestamptz,
    revoked_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_keys_user ON api_keys (user_id) WHERE revoked_at IS NULL;
