package repository

import (
	"context"
	"database/sql/driver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ragent-go/ragent/repository/keyword"
	"github.com/ragent-go/ragent/service"
)

// keywordStartSQL reads, in one round trip, everything a keyword query
// needs before it fetches any block: the query terms' block heads (one
// concatenated bytea per knowledge base and term), their tail postings,
// the removed chunks still in their blocks, and the collection statistics.
// Every key leads with kb_id, so other knowledge bases' rows are never read.
//
// The heads come from an index-only scan per knowledge base and term, in
// the primary key's order, concatenated as they come: a GROUP BY over all
// the terms, or an ordered aggregate, sorted them instead (thousands of
// heads for a common word at a million chunks: 6.8 ms against 1.5 ms for
// three such words). Aggregating a sorted subquery keeps its order in
// practice but not by guarantee, so keyword.Search sorts each term's
// heads.
const keywordStartSQL = `
WITH kb AS (SELECT id FROM knowledge_bases WHERE id = ANY($1) AND deleted_at IS NULL)
SELECT 0 AS kind, kb.id, q.term, 0::int8 AS id, 0::int8 AS a, 0::int8 AS b, h.data
	FROM kb CROSS JOIN unnest($2::text[]) AS q(term)
	CROSS JOIN LATERAL (SELECT string_agg(s.head, ''::bytea) AS data FROM
		(SELECT b.head FROM keyword_blocks b WHERE b.kb_id = kb.id AND b.term = q.term ORDER BY b.last_id) s) h
	WHERE h.data IS NOT NULL
UNION ALL
SELECT 1, t.kb_id, t.term, t.chunk_id, t.tf, t.dl, NULL FROM keyword_tail t
	WHERE t.kb_id IN (SELECT id FROM kb) AND t.term = ANY($2)
UNION ALL
SELECT 2, d.kb_id, u.term, d.chunk_id, 0, 0, NULL FROM keyword_dead d CROSS JOIN LATERAL unnest(d.terms) AS u(term)
	WHERE d.kb_id IN (SELECT id FROM kb) AND u.term = ANY($2)
UNION ALL
SELECT 3, 0, '', 0, coalesce(sum(s.chunks), 0)::int8, coalesce(sum(s.terms), 0)::int8, NULL FROM keyword_stats s
	WHERE s.kb_id IN (SELECT id FROM kb)`

const keywordBlocksSQL = `SELECT b.kb_id, b.term, b.last_id, b.payload
	FROM unnest($1::int8[], $2::text[], $3::int8[]) AS x(kb_id, term, last_id)
	JOIN keyword_blocks b ON b.kb_id = x.kb_id AND b.term = x.term AND b.last_id = x.last_id`

const keywordRowsSQL = `SELECT c.id, c.document_id, d.name, c.kb_id, c.content, c.section
	FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ANY($1)`

// KeywordSearch ranks chunks by BM25 (Okapi, Lucene's idf) and returns the
// exact top Limit, ties broken by chunk id, without scoring every posting:
// block-max pruning over the compacted blocks, the tail scored whole.
//
// All its reads share one snapshot (a read-only repeatable-read
// transaction), so a concurrent compaction or ingestion is seen entirely or
// not at all. Round trips dominate its time, so it speaks pgx on one pooled
// connection and pipelines: BEGIN with the first read, each round of block
// fetches alone, the chunks' rows with COMMIT. It reads committed data only,
// even when ctx carries an InTx transaction.
func (s *Store) KeywordSearch(ctx context.Context, q service.KeywordQuery) ([]service.SearchResult, error) {
	return s.keywordSearchWith(ctx, q, keyword.DefaultPolicy, nil)
}

// keywordSearchWith is KeywordSearch with a given fetch policy, recording
// its work in st when st is not nil: the tests and the benchmark compare
// policies with it.
func (s *Store) keywordSearchWith(ctx context.Context, q service.KeywordQuery, policy keyword.Policy, st *keyword.Stats) ([]service.SearchResult, error) {
	if len(q.Terms) == 0 || len(q.KnowledgeBaseIDs) == 0 || q.Limit <= 0 {
		return nil, nil
	}
	q.Terms = keyword.Fold(q.Terms)
	sqlDB, err := s.db.DB()
	if err != nil {
		return nil, err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, translate(err)
	}
	defer conn.Close()
	var out []service.SearchResult
	err = conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		out, err = keywordSearch(ctx, pc, q, policy, st)
		if err != nil && !pc.PgConn().IsClosed() {
			// Never hand the pool a connection inside a transaction.
			if _, rbErr := pc.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
				return driver.ErrBadConn
			}
		}
		return err
	})
	return out, translate(err)
}

// The four kinds of row keywordStartSQL returns, in its UNION's order.
const (
	rowHeads = iota // a term's block heads in a knowledge base: kb, term, data
	rowTail         // a tail posting: kb, term, id (the chunk), a = tf, b = dl
	rowDead         // a removed chunk still in a term's blocks: kb, term, id
	rowStats        // the collection statistics: a = chunks, b = their terms
)

func keywordSearch(ctx context.Context, pc *pgx.Conn, q service.KeywordQuery, policy keyword.Policy, st *keyword.Stats) ([]service.SearchResult, error) {
	terms := make([]string, len(q.Terms))
	for i, t := range q.Terms {
		terms[i] = t.Term
	}
	kbs := make([]int64, len(q.KnowledgeBaseIDs))
	for i, id := range q.KnowledgeBaseIDs {
		kbs[i] = int64(id)
	}
	ks := keyword.NewSearch(q.Terms, q.K1, q.B, q.Limit)
	defer ks.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	b.Queue(keywordStartSQL, kbs, terms)
	br := pc.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	err = startKeywordSearch(ks, rows)
	rows.Close()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	for round := 0; ; round++ {
		want := ks.Needed(policy, round)
		if len(want) == 0 {
			break
		}
		decoded, err := fetchBlocks(ctx, pc, ks, want)
		if err != nil {
			return nil, err
		}
		st.AddRound(len(want), decoded)
	}
	return keywordResults(ctx, pc, ks.Ranked())
}

// startKeywordSearch feeds ks the rows of keywordStartSQL.
func startKeywordSearch(ks *keyword.Search, rows pgx.Rows) error {
	for rows.Next() {
		var (
			kind   int
			kb, id int64
			term   string
			a, b   int64
			data   []byte
		)
		if err := rows.Scan(&kind, &kb, &term, &id, &a, &b, &data); err != nil {
			return err
		}
		switch kind {
		case rowHeads:
			if err := ks.AddHeads(kb, term, data); err != nil {
				return err
			}
		case rowTail:
			ks.AddTail(kb, term, keyword.Posting{ID: id, TF: int32(a), DL: int32(b)})
		case rowDead:
			ks.AddDead(term, id)
		case rowStats:
			ks.SetStats(a, b)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	ks.Start()
	return nil
}

// fetchBlocks reads want's payloads into ks; it returns the number of
// postings decoded.
func fetchBlocks(ctx context.Context, pc *pgx.Conn, ks *keyword.Search, want []*keyword.Block) (int, error) {
	kbs, terms, lasts := make([]int64, len(want)), make([]string, len(want)), make([]int64, len(want))
	for i, b := range want {
		kbs[i], terms[i], lasts[i] = b.KB(), b.Term(), b.Last()
	}
	ks.GrowFor(want)
	rows, err := pc.Query(ctx, keywordBlocksSQL, kbs, terms, lasts)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	decoded := 0
	for rows.Next() {
		var (
			kb, last int64
			term     string
			payload  pgtype.DriverBytes // the driver's buffer, not a copy: ~1 MB per slow query
		)
		if err := rows.Scan(&kb, &term, &last, &payload); err != nil {
			return 0, err
		}
		n, err := ks.AddPayload(kb, term, payload)
		if err != nil {
			return 0, err
		}
		decoded += n
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	ks.EndRound(want)
	return decoded, nil
}

// keywordResults reads the rows of the ranked chunks and commits. It runs
// after Needed found nothing left to fetch, so ranked is the answer.
func keywordResults(ctx context.Context, pc *pgx.Conn, ranked []keyword.Scored) ([]service.SearchResult, error) {
	ids := make([]int64, len(ranked))
	for i, r := range ranked {
		ids[i] = r.ID
	}
	b := &pgx.Batch{}
	b.Queue(keywordRowsSQL, ids)
	b.Queue("COMMIT")
	br := pc.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]searchRow, len(ranked))
	for rows.Next() {
		var r searchRow
		if err := rows.Scan(&r.ChunkID, &r.DocumentID, &r.DocumentName, &r.KbID, &r.Content, &r.Section); err != nil {
			rows.Close()
			return nil, err
		}
		byID[r.ChunkID] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	out := make([]service.SearchResult, 0, len(ranked))
	for _, r := range ranked {
		if row, ok := byID[r.ID]; ok {
			row.Score = r.Score
			out = append(out, row.result())
		}
	}
	return out, nil
}
