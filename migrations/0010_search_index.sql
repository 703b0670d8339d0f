-- With an external search engine (RAGENT_SEARCH_BACKEND=opensearch) a
-- document's chunks are committed here first and become searchable there
-- later, through the search-index outbox message. search_pending_since is
-- when the engine's copy of the document fell behind (its chunks were
-- replaced or it was deleted), NULL when the copy is current; the document
-- turns ready only when it is cleared, and the reaper queues the message
-- again for a copy that stays behind (the engine was down long enough for
-- the message to be dead-lettered). Deleted documents keep the column, so
-- their removal from the engine is retried the same way.
ALTER TABLE documents ADD COLUMN search_pending_since timestamptz;
CREATE INDEX documents_search_pending ON documents (search_pending_since) WHERE search_pending_since IS NOT NULL;
