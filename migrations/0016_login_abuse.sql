-- Logged-out tokens, until they would have expired anyway. They lived in
-- Redis, where an eviction (or a restart without persistence) brought a
-- logged-out token back; here they are read in the same lookup as the user
-- row every request makes (repository.Store.SessionUser).
CREATE TABLE revoked_tokens (
    token_id   text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX revoked_tokens_expires ON revoked_tokens (expires_at);

-- Failed sign-ins get a retention (RAGENT_AUDIT_LOGIN_RETENTION): every
-- unknown username tried is one row, which an append-only table would keep
-- for ever. The trigger still refuses every UPDATE and TRUNCATE, and every
-- DELETE but of a failed sign-in at least a day old, so even a compromised
-- application cannot erase a recent attack or any other kind of event.
CREATE OR REPLACE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND OLD.action = 'auth.login' AND OLD.result <> 'success'
            AND OLD.at < now() - interval '1 day' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_events is append-only' USING ERRCODE = 'insufficient_privilege';
END
$$;
