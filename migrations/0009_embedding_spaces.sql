-- The embedding model is part of a knowledge base's identity (README
-- "Embedding model changes"). A space is model + dimension + the query and
-- document prefixes; its key is the first 16 hex digits of the SHA-256 of
-- the four joined by U+001F (service.EmbeddingSpace.Key). Existing
-- knowledge bases had no prefixes.
ALTER TABLE knowledge_bases
    ADD COLUMN embedding_query_prefix    text NOT NULL DEFAULT '',
    ADD COLUMN embedding_document_prefix text NOT NULL DEFAULT '',
    ADD COLUMN embedding_space           text NOT NULL DEFAULT '',
    -- The space being re-embedded into; NULL when none.
    ADD COLUMN reembed_model           text,
    ADD COLUMN reembed_dim             integer CHECK (reembed_dim BETWEEN 1 AND 4000),
    ADD COLUMN reembed_query_prefix    text,
    ADD COLUMN reembed_document_prefix text,
    ADD COLUMN reembed_space           text;
UPDATE knowledge_bases SET embedding_space =
    left(encode(sha256(convert_to(embedding_model || chr(31) || embedding_dim::text || chr(31) || chr(31), 'UTF8')), 'hex'), 16);

-- Every chunk names the space of its vector, so vector search filters by
-- space and two models of one dimension never mix. next_embedding holds
-- the vector in the knowledge base's re-embedding target until the switch;
-- a chunk written during a re-embedding has only that one (embedding NULL,
-- embedding_dim 0, embedding_space ''): keyword search finds it meanwhile.
ALTER TABLE chunks
    ADD COLUMN embedding_space text NOT NULL DEFAULT '',
    ADD COLUMN next_embedding  halfvec,
    ALTER COLUMN embedding DROP NOT NULL;
UPDATE chunks c SET embedding_space = kb.embedding_space FROM knowledge_bases kb WHERE kb.id = c.kb_id;

-- Progress of a re-embedding is per document: the target space its chunks'
-- next vectors were written for, in the transaction that wrote them.
ALTER TABLE documents ADD COLUMN reembedded_space text NOT NULL DEFAULT '';
