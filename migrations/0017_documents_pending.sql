-- The reaper looks for documents pending too long (their ingest message was
-- published but the MQ lost it, README "Ingestion never gets stuck").
CREATE INDEX documents_pending ON documents (updated_at) WHERE status = 'pending' AND deleted_at IS NULL;
