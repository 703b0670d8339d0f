-- ragent schema v1. IDs are Snowflake bigints; timestamps are timestamptz.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE settings (
    key        text PRIMARY KEY,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id            bigint PRIMARY KEY,
    username      text NOT NULL,
    password_hash text NOT NULL,
    role          text NOT NULL CHECK (role IN ('admin', 'user')),
    disabled      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    deleted_at    timestamptz
);
CREATE UNIQUE INDEX users_username_live ON users (lower(username)) WHERE deleted_at IS NULL;

CREATE TABLE knowledge_bases (
    id              bigint PRIMARY KEY,
    name            text NOT NULL,
    description     text NOT NULL DEFAULT '',
    embedding_model text NOT NULL,
    embedding_dim   integer NOT NULL CHECK (embedding_dim BETWEEN 1 AND 4000),
    chunk_size      integer NOT NULL DEFAULT 512,
    chunk_overlap   integer NOT NULL DEFAULT 64,
    vector_weight   double precision NOT NULL DEFAULT 1,
    -- BM25 statistics of the live chunks, maintained with them in one transaction.
    chunk_total     bigint NOT NULL DEFAULT 0,
    term_total      bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    deleted_at      timestamptz
);
CREATE UNIQUE INDEX knowledge_bases_name_live ON knowledge_bases (name) WHERE deleted_at IS NULL;

CREATE TABLE document_blobs (
    sha256     text PRIMARY KEY,
    bytes      bytea NOT NULL,
    size       bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE documents (
    id          bigint PRIMARY KEY,
    kb_id       bigint NOT NULL REFERENCES knowledge_bases (id),
    name        text NOT NULL,
    mime        text NOT NULL,
    size        bigint NOT NULL,
    sha256      text NOT NULL REFERENCES document_blobs (sha256),
    status      text NOT NULL CHECK (status IN ('pending', 'running', 'ready', 'failed')),
    error       text NOT NULL DEFAULT '',
    chunk_count integer NOT NULL DEFAULT 0,
    generation  integer NOT NULL DEFAULT 1,
    attempts    integer NOT NULL DEFAULT 0,
    started_at  timestamptz,
    created_by  bigint,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    deleted_at  timestamptz
);
-- The same file twice in one knowledge base is one document.
CREATE UNIQUE INDEX documents_kb_sha_live ON documents (kb_id, sha256) WHERE deleted_at IS NULL;
CREATE INDEX documents_kb ON documents (kb_id, created_at DESC) WHERE deleted_at IS NULL;
CREATE INDEX documents_running ON documents (started_at) WHERE status = 'running' AND deleted_at IS NULL;

CREATE TABLE chunks (
    id            bigint PRIMARY KEY,
    document_id   bigint NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    kb_id         bigint NOT NULL,
    generation    integer NOT NULL,
    ordinal       integer NOT NULL,
    content       text NOT NULL,
    section       text NOT NULL DEFAULT '',
    token_count   integer NOT NULL,
    term_count    integer NOT NULL, -- BM25 document length
    embedding     halfvec NOT NULL,
    embedding_dim integer NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (document_id, generation, ordinal)
);
CREATE INDEX chunks_kb ON chunks (kb_id);
-- One HNSW index per dimension in use; repository.EnsureVectorIndex adds more.
CREATE INDEX chunks_embedding_512 ON chunks USING hnsw ((embedding::halfvec(512)) halfvec_cosine_ops)
    WHERE embedding_dim = 512;

-- The keyword index: one posting per (term, chunk) with its term frequency
-- and the chunk's length, so BM25 scores a term from an index-only scan.
-- Document frequencies are counted at query time over live chunks, so
-- concurrent ingestion never contends on shared per-term counters.
CREATE TABLE chunk_terms (
    term     text NOT NULL,
    kb_id    bigint NOT NULL,
    chunk_id bigint NOT NULL REFERENCES chunks (id) ON DELETE CASCADE,
    tf       integer NOT NULL,
    dl       integer NOT NULL,
    PRIMARY KEY (term, kb_id, chunk_id) INCLUDE (tf, dl)
);
CREATE INDEX chunk_terms_chunk ON chunk_terms (chunk_id);

CREATE TABLE outbox (
    id         bigint PRIMARY KEY,
    topic      text NOT NULL,
    key        text NOT NULL,
    payload    bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz,
    attempts   integer NOT NULL DEFAULT 0,
    last_error text NOT NULL DEFAULT ''
);
CREATE INDEX outbox_unsent ON outbox (id) WHERE sent_at IS NULL;

CREATE TABLE conversations (
    id         bigint PRIMARY KEY,
    user_id    bigint NOT NULL REFERENCES users (id),
    title      text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz,
    UNIQUE (id, user_id)
);
CREATE INDEX conversations_user ON conversations (user_id, updated_at DESC) WHERE deleted_at IS NULL;

CREATE TABLE messages (
    id                bigint PRIMARY KEY,
    conversation_id   bigint NOT NULL REFERENCES conversations (id),
    role              text NOT NULL CHECK (role IN ('user', 'assistant')),
    content           text NOT NULL,
    thinking          text NOT NULL DEFAULT '',
    status            text NOT NULL CHECK (status IN ('completed', 'rejected', 'cancelled', 'failed')),
    sources           jsonb NOT NULL DEFAULT '[]',
    reply_to          bigint,
    prompt_tokens     integer NOT NULL DEFAULT 0,
    completion_tokens integer NOT NULL DEFAULT 0,
    latency_ms        bigint NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_conversation ON messages (conversation_id, id);

CREATE TABLE intent_nodes (
    id                 bigint PRIMARY KEY,
    parent_id          bigint REFERENCES intent_nodes (id),
    code               text NOT NULL UNIQUE,
    name               text NOT NULL,
    description        text NOT NULL DEFAULT '',
    examples           jsonb NOT NULL DEFAULT '[]',
    kind               text NOT NULL CHECK (kind IN ('kb', 'system')),
    knowledge_base_ids jsonb NOT NULL DEFAULT '[]',
    prompt_template    text NOT NULL DEFAULT '',
    enabled            boolean NOT NULL DEFAULT true,
    sort               integer NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX intent_nodes_parent ON intent_nodes (parent_id);

CREATE TABLE term_mappings (
    id          bigint PRIMARY KEY,
    source_term text NOT NULL,
    target_term text NOT NULL,
    priority    integer NOT NULL DEFAULT 0,
    enabled     boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX term_mappings_source_enabled ON term_mappings (source_term) WHERE enabled;
