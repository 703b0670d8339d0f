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

-- Signed webhooks per knowledge base: a POST when one of its documents
-- becomes ready or failed. The signing secret is stored encrypted
-- (AES-256-GCM under a key derived from the auth signing secret): it must
-- be recoverable to sign with, so it cannot be hashed.
CREATE TABLE webhooks (
    id         bigint PRIMARY KEY,
    kb_id      bigint NOT NULL REFERENCES knowledge_bases (id),
    url        text NOT NULL,
    secret_enc bytea NOT NULL,
    created_by bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz
);
CREATE INDEX webhooks_kb ON webhooks (kb_id) WHERE deleted_at IS NULL;

-- The webhooks' outbox: one row per event and webhook, written in the
-- transaction that changes the document's status, then delivered (and
-- retried with backoff) by a deliverer on every instance, which claims due
-- rows with a lease under FOR UPDATE SKIP LOCKED. A row that exhausts its
-- attempts ends 'failed' (dead-lettered) with its last error.
CREATE TABLE webhook_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    webhook_id      bigint NOT NULL REFERENCES webhooks (id),
    event           text NOT NULL,
    payload         text NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_until     timestamptz,
    last_error      text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, id DESC);
