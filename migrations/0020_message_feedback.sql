-- Answer feedback (README "Answer feedback"): a thumbs up or down and an
-- optional comment per answer and user (rating again replaces it), and the
-- chunks an admin marks as the ones that should have been found, which
-- `ragent eval export-feedback` writes as a BEIR set. kb_ids copies the
-- answer's searched knowledge bases (messages.knowledge_base_ids) so the
-- admin page filters by knowledge base without unpacking every message.
CREATE TABLE message_feedback (
    id              bigint PRIMARY KEY,
    message_id      bigint NOT NULL REFERENCES messages (id),
    conversation_id bigint NOT NULL,
    user_id         bigint NOT NULL,
    rating          text NOT NULL CHECK (rating IN ('up', 'down')),
    comment         text NOT NULL DEFAULT '',
    kb_ids          jsonb NOT NULL DEFAULT '[]',
    relevant_chunk_ids jsonb NOT NULL DEFAULT '[]',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (message_id, user_id)
);
CREATE INDEX message_feedback_created ON message_feedback (created_at DESC, id DESC);
CREATE INDEX message_feedback_kbs ON message_feedback USING gin (kb_ids jsonb_path_ops);
