-- Chat submits keyed by the client's Idempotency-Key (README "Running Redis
-- in production"): the database's last line behind the Redis submit lock.
-- A retried POST /chat that a lock lost in a Redis failover lets through
-- hits this primary key in the transaction that would write its question
-- (and new conversation), so it never makes a second conversation or a
-- second user message; it follows the original turn instead.
CREATE TABLE chat_submits (
    user_id         bigint NOT NULL,
    request_key     text NOT NULL,
    conversation_id bigint NOT NULL,
    message_id      bigint NOT NULL,
    task_id         bigint NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, request_key)
);

-- What the MQ named a published ingest message (a Redis stream entry id),
-- so the relay can ask it whether it still holds the message while the
-- document waits: an entry that a promoted replica never received is sent
-- again within RAGENT_INGEST_CONFIRM_AFTER instead of after
-- RAGENT_INGEST_PENDING_TIMEOUT. checked_at is the last time it was asked;
-- confirmed_at when the document moved on (the message was delivered) and
-- nothing more is asked.
ALTER TABLE outbox ADD COLUMN sent_ref text NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN checked_at timestamptz;
ALTER TABLE outbox ADD COLUMN confirmed_at timestamptz;
CREATE INDEX outbox_unconfirmed ON outbox (checked_at, id) WHERE sent_ref <> '' AND confirmed_at IS NULL;
