-- Ingestion shares fairly (docs/ingestion.md "Fair shares"). The relay
-- keeps at most a bound of a knowledge base's ingest messages in flight
-- (published, their document not yet finished); the others stay in the
-- outbox until their knowledge base's turn, knowledge bases and the
-- uploaders within one taking turns.
--
-- outbox.kb_id and outbox.uploader are set on the ingest message of a
-- document's new generation: such a row waits for its turn. NULL (every
-- other message, a re-publication of a document already in flight, and
-- rows written before this migration) goes out at once.
ALTER TABLE outbox ADD COLUMN kb_id bigint;
ALTER TABLE outbox ADD COLUMN uploader bigint;
-- documents.sent_generation is the generation whose ingest message the relay
-- published: a pending or running document with sent_generation =
-- generation is in flight.
ALTER TABLE documents ADD COLUMN sent_generation integer;

CREATE INDEX outbox_waiting_turn ON outbox (kb_id, uploader, id) WHERE sent_at IS NULL AND kb_id IS NOT NULL;
CREATE INDEX outbox_unsent_free ON outbox (id) WHERE sent_at IS NULL AND kb_id IS NULL;
CREATE INDEX documents_in_flight ON documents (kb_id)
    WHERE status IN ('pending', 'running') AND deleted_at IS NULL AND sent_generation = generation;
