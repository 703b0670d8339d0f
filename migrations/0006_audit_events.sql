-- The audit log (README "Audit log"): one row per security-relevant change
-- or login, written in the transaction of the change it records (a failed
-- change is recorded after its rollback, with the failure as its result).
-- The actor is a user, an API key, or nobody (a failed login); actor_name
-- keeps the name as it was, so the row stays readable after a deletion.
CREATE TABLE audit_events (
    id            bigint PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    actor_user_id bigint,
    actor_key_id  bigint,
    actor_name    text NOT NULL DEFAULT '',
    action        text NOT NULL,
    target_type   text NOT NULL DEFAULT '',
    target_id     text NOT NULL DEFAULT '',
    result        text NOT NULL,
    detail        text NOT NULL DEFAULT '',
    request_id    text NOT NULL DEFAULT '',
    ip            text NOT NULL DEFAULT ''
);
-- Ids are time-ordered Snowflakes, so (at, id) order and id order agree;
-- every listing pages by id descending under its filter.
CREATE INDEX audit_events_actor_user ON audit_events (actor_user_id, id DESC) WHERE actor_user_id IS NOT NULL;
CREATE INDEX audit_events_actor_key ON audit_events (actor_key_id, id DESC) WHERE actor_key_id IS NOT NULL;
CREATE INDEX audit_events_action ON audit_events (action, id DESC);
CREATE INDEX audit_events_target ON audit_events (target_id, id DESC);
CREATE INDEX audit_events_at ON audit_events (at);

-- Append-only: no statement may change or remove a recorded event, the
-- application's own role included. The owner of the table could drop this
-- trigger, so it guards against bugs and a compromised application's
-- ordinary queries, not against someone holding the owner's DDL rights;
-- for that, ship the log elsewhere too.
CREATE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only' USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_events_no_update BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();
