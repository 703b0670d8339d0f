-- The keyword index as blocks of postings with score upper bounds, so BM25
-- top-k can skip blocks that cannot reach the current k-th score (see the
-- README, "The keyword index"). Built in place from chunk_terms, which goes.

-- Compacted postings: per (knowledge base, term), runs of up to 128 postings
-- in chunk-id order. payload is, per posting, int8 chunk id, int4 tf, int4
-- dl (big-endian, as int8send/int4send write them). head is int8 last id,
-- int8 first id, int4 posting count, int4 m, then m (int4 tf, int4 dl) pairs:
-- the Pareto frontier of the block's (high tf, low dl) postings, which bounds
-- every posting's BM25 term score for any idf and average length.
CREATE TABLE keyword_blocks (
    kb_id   bigint NOT NULL,
    term    text NOT NULL,
    last_id bigint NOT NULL,
    head    bytea NOT NULL,
    payload bytea NOT NULL,
    PRIMARY KEY (kb_id, term, last_id) INCLUDE (head)
);
-- Compress payloads (a full one is 2 kB, the default threshold), with lz4
-- where the server has it: it decompresses several times faster than pglz.
ALTER TABLE keyword_blocks SET (toast_tuple_target = 256);
DO $$ BEGIN
    ALTER TABLE keyword_blocks ALTER COLUMN payload SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN NULL;
END $$;

-- New postings, one row each, until the compactor merges them into blocks.
-- Queries score the tail exhaustively; compaction keeps it small.
CREATE TABLE keyword_tail (
    kb_id    bigint NOT NULL,
    term     text NOT NULL,
    chunk_id bigint NOT NULL,
    tf       integer NOT NULL,
    dl       integer NOT NULL,
    PRIMARY KEY (kb_id, term, chunk_id) INCLUDE (tf, dl)
);
CREATE INDEX keyword_tail_chunk ON keyword_tail (chunk_id);

-- The distinct terms of every indexed chunk, so removing a chunk knows
-- which postings (and document frequencies) it takes away.
CREATE TABLE keyword_docs (
    chunk_id bigint PRIMARY KEY,
    kb_id    bigint NOT NULL,
    terms    text[] NOT NULL
);

-- Removed chunks whose postings are still in blocks, with those postings'
-- terms: queries skip them and subtract them from df until the compactor
-- rewrites the blocks without them.
CREATE TABLE keyword_dead (
    kb_id    bigint NOT NULL,
    chunk_id bigint NOT NULL,
    terms    text[] NOT NULL,
    PRIMARY KEY (kb_id, chunk_id)
);

-- Collection statistics as insert-only deltas (chunks, summed lengths),
-- summed per query and folded by the compactor, so concurrent ingestion into
-- one knowledge base never waits on one counter row.
CREATE TABLE keyword_stats (
    kb_id  bigint NOT NULL,
    chunks bigint NOT NULL,
    terms  bigint NOT NULL
);
CREATE INDEX keyword_stats_kb ON keyword_stats (kb_id) INCLUDE (chunks, terms);

INSERT INTO keyword_docs (chunk_id, kb_id, terms)
SELECT chunk_id, min(kb_id), array_agg(term ORDER BY term) FROM chunk_terms GROUP BY chunk_id;

INSERT INTO keyword_stats (kb_id, chunks, terms)
SELECT kb_id, count(*), sum(term_count) FROM chunks GROUP BY kb_id;

-- A posting is on its block's frontier when every posting with a higher tf
-- (or the same tf, ordered earlier) has a larger dl.
WITH p AS (
    SELECT kb_id, term, chunk_id, tf, dl,
           (row_number() OVER (PARTITION BY kb_id, term ORDER BY chunk_id) - 1) / 128 AS blk
    FROM chunk_terms
), f AS (
    SELECT p.*, dl < coalesce(min(dl) OVER (PARTITION BY kb_id, term, blk ORDER BY tf DESC, dl
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 2147483647) AS frontier
    FROM p
)
INSERT INTO keyword_blocks (kb_id, term, last_id, head, payload)
SELECT kb_id, term, max(chunk_id),
       int8send(max(chunk_id)) || int8send(min(chunk_id)) || int4send(count(*)::int)
           || int4send((count(*) FILTER (WHERE frontier))::int)
           || string_agg(int4send(tf) || int4send(dl), ''::bytea ORDER BY tf DESC) FILTER (WHERE frontier),
       string_agg(int8send(chunk_id) || int4send(tf) || int4send(dl), ''::bytea ORDER BY chunk_id)
FROM f GROUP BY kb_id, term, blk;

DROP TABLE chunk_terms;
ALTER TABLE knowledge_bases DROP COLUMN chunk_total, DROP COLUMN term_total;
