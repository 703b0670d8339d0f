-- Public chat-widget keys (docs/widget.md) are API keys of kind 'widget':
-- they keep the same hash, prefix, owner, knowledge bases, expiry and
-- revocation, and add the page origins they answer and their rate limits
-- (chats per minute per origin and per visitor). API keys are kind 'api'
-- and leave the widget columns null.
ALTER TABLE api_keys
    ADD COLUMN kind         text NOT NULL DEFAULT 'api' CHECK (kind IN ('api', 'widget')),
    ADD COLUMN origins      jsonb,
    ADD COLUMN origin_rate  integer,
    ADD COLUMN visitor_rate integer;
