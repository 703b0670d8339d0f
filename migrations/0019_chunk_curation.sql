-- Chunk curation (README "Curating chunks"): admins and editors edit,
-- disable, add and delete chunks, each change a revision.
--
-- enabled: a disabled chunk stays stored (to enable again) but is out of
-- every index: its keyword postings are removed, vector search filters it,
-- and the OpenSearch copy is deleted. manual: added by hand, not parsed from
-- the file. revision: how many changes the chunk has had (0 as parsed);
-- the revision rows below are numbered by it, so concurrent changes of one
-- chunk, serialized by its row lock, stay linear.
ALTER TABLE chunks
    ADD COLUMN enabled  boolean NOT NULL DEFAULT true,
    ADD COLUMN manual   boolean NOT NULL DEFAULT false,
    ADD COLUMN revision integer NOT NULL DEFAULT 0;

-- A knowledge base's own "manual" document holds the chunks added to the
-- knowledge base rather than to a file (a question and its answer): it has
-- no file (sha256 NULL), is ready from the start, and no reindex rebuilds
-- it. One per knowledge base.
ALTER TABLE documents ADD COLUMN kind text NOT NULL DEFAULT 'file' CHECK (kind IN ('file', 'manual'));
CREATE UNIQUE INDEX documents_kb_manual_live ON documents (kb_id) WHERE kind = 'manual' AND deleted_at IS NULL;
-- How many of the current generation's chunks were changed by hand (edited,
-- disabled, added or deleted): what a reindex of the file would discard,
-- shown before it does. ReplaceChunks resets it with the generation.
ALTER TABLE documents ADD COLUMN curated_chunks integer NOT NULL DEFAULT 0;

-- One row per change of a chunk: who, when, and the state before and after
-- (content and enabled). A deleted chunk's rows stay, so its history is
-- still readable; so do those of a generation a reindex replaced. No
-- foreign key to chunks for that reason.
CREATE TABLE chunk_revisions (
    id             bigint PRIMARY KEY,
    chunk_id       bigint NOT NULL,
    document_id    bigint NOT NULL,
    kb_id          bigint NOT NULL,
    generation     integer NOT NULL,
    revision       integer NOT NULL,
    action         text NOT NULL CHECK (action IN ('create', 'edit', 'disable', 'enable', 'delete', 'restore')),
    content_before text,
    content_after  text,
    enabled_before boolean,
    enabled_after  boolean,
    actor_user_id  bigint,
    actor_name     text NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (chunk_id, revision)
);
CREATE INDEX chunk_revisions_document ON chunk_revisions (document_id, generation);
