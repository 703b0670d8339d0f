-- The relays publish outside any transaction (docs/ingestion.md "Fair
-- shares"): a short statement claims the rows a relay sends, the publish
-- runs with no transaction open, and another short statement marks each
-- row sent or releases its claim. claimed_by is the claiming relay's
-- random token, claimed_until when the claim lapses: the rows of a relay
-- that died mid-publish become claimable again then. A live claim of an
-- ingest row waiting for its turn counts as one of its knowledge base's
-- documents in flight.
ALTER TABLE outbox ADD COLUMN claimed_by bigint;
ALTER TABLE outbox ADD COLUMN claimed_until timestamptz;

CREATE INDEX outbox_claimed ON outbox (kb_id, uploader) WHERE sent_at IS NULL AND claimed_until IS NOT NULL;
