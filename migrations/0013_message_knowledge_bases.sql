-- The knowledge bases each chat turn searched, on both of its messages, so an
-- API key limited to some knowledge bases sees only conversations whose every
-- turn stayed within its list (README "API keys"). A JSON array of ids; []
-- for a turn that searched none. NULL on rows written before this column:
-- what they searched is unknown, so a limited key never sees them.
ALTER TABLE messages ADD COLUMN knowledge_base_ids jsonb;
