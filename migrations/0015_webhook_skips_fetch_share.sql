-- Webhook deliveries skipped because the webhook's creator can no longer
-- read its knowledge base (checked at delivery time): kept, like failed
-- ones, until RAGENT_WEBHOOK_DELIVERY_RETENTION, so the webhook shows them.
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_status_check,
    ADD CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'sent', 'failed', 'skipped'));
CREATE INDEX webhook_deliveries_done ON webhook_deliveries (created_at) WHERE status IN ('failed', 'skipped');
-- The deliveries and fetches in flight (a live lease): a claim counts them
-- per webhook and per knowledge base to keep each one's share.
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (webhook_id) WHERE lease_until IS NOT NULL;
CREATE INDEX document_sources_leased ON document_sources (lease_until) WHERE lease_until IS NOT NULL;
