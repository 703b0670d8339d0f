-- Ingestion pipelines (README "For pipelines"): documents named by the
-- pipeline's own id, documents fetched from a URL, and status listings by
-- update time.
--
-- external_id names a document for its pipeline: uploading the same id
-- again makes a new generation of the same row, so search keeps serving the
-- old chunks until the new ones replace them in one transaction.
ALTER TABLE documents ADD COLUMN external_id text;
CREATE UNIQUE INDEX documents_kb_external_live ON documents (kb_id, external_id)
    WHERE deleted_at IS NULL AND external_id IS NOT NULL;
-- A URL import exists before its first fetch: it has no content (no blob)
-- until then.
ALTER TABLE documents ALTER COLUMN sha256 DROP NOT NULL;
-- "What changed since": GET …/documents?updatedSince=.
CREATE INDEX documents_kb_updated ON documents (kb_id, updated_at) WHERE deleted_at IS NULL;

-- Where an imported document comes from and when to fetch it again. Every
-- instance runs the fetcher; a due row is claimed with a lease (lease_until,
-- taken under FOR UPDATE SKIP LOCKED), so one instance fetches it at a time
-- and a crashed fetcher's claim runs out by itself.
CREATE TABLE document_sources (
    document_id     bigint PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE,
    url             text NOT NULL,
    refresh_seconds integer NOT NULL DEFAULT 0 CHECK (refresh_seconds >= 0),
    etag            text NOT NULL DEFAULT '',
    last_modified   text NOT NULL DEFAULT '',
    next_fetch_at   timestamptz,
    lease_until     timestamptz,
    fetched_at      timestamptz,
    last_error      text NOT NULL DEFAULT ''
);
CREATE INDEX document_sources_due ON document_sources (next_fetch_at) WHERE next_fetch_at IS NOT NULL;
