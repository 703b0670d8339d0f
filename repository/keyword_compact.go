package repository

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/ragent-go/ragent/repository/keyword"
)

// keywordCompactLock is the advisory lock that lets one compactor run at a
// time across every instance ("kwco"). It is taken per transaction, so a
// compactor that dies releases it with its connection.
const keywordCompactLock = 0x6b77636f

// compactPostings bounds one compaction step: the tail postings it moves.
const compactPostings = 100000

// compactDeadTerms bounds one purge step: the terms whose blocks it rewrites
// without removed chunks.
const compactDeadTerms = 2000

// RunKeywordCompactor merges the keyword tail into blocks and purges removed
// chunks from them until ctx ends: a step whenever a knowledge base's tail
// reaches minTail postings, everything every flushEvery, checking every
// tick. Every instance may run it; the advisory lock lets one work at a
// time.
func (s *Store) RunKeywordCompactor(ctx context.Context, tick, flushEvery time.Duration, minTail int) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	lastFlush := time.Now()
	for {
		threshold := minTail
		if time.Since(lastFlush) >= flushEvery {
			threshold, lastFlush = 1, time.Now()
		}
		for {
			more, err := s.CompactKeywords(ctx, threshold)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.log.Warn("keyword compaction", "err", err)
				break
			}
			if !more {
				break
			}
		}
		if threshold == 1 {
			if err := s.ShrinkKeywordTail(ctx, tailShrinkBytes); err != nil && ctx.Err() == nil {
				s.log.Warn("keyword tail shrink", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// tailShrinkBytes is the size of the tail's indexes above which an almost
// empty tail has them rebuilt. Under 10k rows they need under 1 MiB, so
// 8 MiB is bloat of at least eight times (a 10k-chunk bulk load leaves
// about 40 MiB), and a rebuild of so small a table takes milliseconds.
const tailShrinkBytes = 8 << 20

// keywordShrinkLock keeps two instances from rebuilding the tail's indexes
// at once ("kwsh").
const keywordShrinkLock = 0x6b777368

// ShrinkKeywordTail rebuilds the tail's indexes, without blocking writers,
// when they exceed minBytes while the tail holds under 10k rows: Postgres
// reuses emptied index pages but never returns them, so after a
// million-row load and its compaction the empty tail would keep the space
// of a million rows.
func (s *Store) ShrinkKeywordTail(ctx context.Context, minBytes int64) error {
	var bloated bool
	if err := s.db.WithContext(ctx).Raw(`SELECT pg_indexes_size('keyword_tail') > ?
		AND NOT EXISTS (SELECT 1 FROM keyword_tail OFFSET ? LIMIT 1)`, minBytes, 10000).Scan(&bloated).Error; err != nil || !bloated {
		return translate(err)
	}
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return translate(err)
	}
	defer conn.Close()
	var locked bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", keywordShrinkLock).Scan(&locked); err != nil || !locked {
		return translate(err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", keywordShrinkLock)
	// CONCURRENTLY cannot run in a transaction, hence the session lock.
	_, err = conn.ExecContext(ctx, "REINDEX TABLE CONCURRENTLY keyword_tail")
	return translate(err)
}

// CompactKeywords runs one bounded compaction step in one transaction: it
// folds the statistics deltas, then moves up to compactPostings tail
// postings of one knowledge base whose tail has at least minTail postings
// into blocks, or else purges removed chunks from the blocks of up to
// compactDeadTerms terms. It reports whether it found work (more may
// remain); false also when another instance is compacting.
func (s *Store) CompactKeywords(ctx context.Context, minTail int) (bool, error) {
	more := false
	err := s.WithinTx(ctx, func(tx *Store) error {
		var locked bool
		if err := tx.db.Raw("SELECT pg_try_advisory_xact_lock(?)", keywordCompactLock).Scan(&locked).Error; err != nil || !locked {
			return err
		}
		if err := tx.db.Exec(`WITH d AS (
				DELETE FROM keyword_stats WHERE kb_id IN (SELECT kb_id FROM keyword_stats GROUP BY kb_id HAVING count(*) > 1)
				RETURNING kb_id, chunks, terms
			) INSERT INTO keyword_stats (kb_id, chunks, terms) SELECT kb_id, sum(chunks), sum(terms) FROM d GROUP BY kb_id`).Error; err != nil {
			return err
		}
		var kbs []int64
		// The knowledge bases in the tail by a skip scan of its primary key,
		// each counted only up to minTail.
		if err := tx.db.Raw(`WITH RECURSIVE kbs AS (
				(SELECT kb_id FROM keyword_tail ORDER BY kb_id LIMIT 1)
				UNION ALL
				SELECT (SELECT t.kb_id FROM keyword_tail t WHERE t.kb_id > kbs.kb_id ORDER BY t.kb_id LIMIT 1)
				FROM kbs WHERE kbs.kb_id IS NOT NULL
			)
			SELECT kb_id FROM kbs WHERE kb_id IS NOT NULL
				AND (SELECT count(*) FROM (SELECT 1 FROM keyword_tail t WHERE t.kb_id = kbs.kb_id LIMIT ?) x) >= ?
			LIMIT 1`, max(minTail, 1), max(minTail, 1)).Scan(&kbs).Error; err != nil {
			return err
		}
		if len(kbs) == 1 {
			more = true
			return tx.compactTail(kbs[0])
		}
		if err := tx.db.Raw("SELECT kb_id FROM keyword_dead LIMIT 1").Scan(&kbs).Error; err != nil || len(kbs) == 0 {
			return err
		}
		more = true
		return tx.purgeDead(kbs[0])
	})
	return more, translate(err)
}

// compactTail moves the first compactPostings tail postings of a knowledge
// base, by term, into its blocks, whole terms only.
func (s *Store) compactTail(kbID int64) error {
	if err := s.lockKeywords(kbID, true); err != nil {
		return err
	}
	var first []string
	if err := s.db.Raw("SELECT term FROM keyword_tail WHERE kb_id = ? ORDER BY term LIMIT ?", kbID, compactPostings).
		Scan(&first).Error; err != nil {
		return err
	}
	terms := distinctSorted(first)
	if len(first) == compactPostings && len(terms) > 1 {
		terms = terms[:len(terms)-1] // the last term may go on past the limit
	}
	return s.rewriteTerms(kbID, terms)
}

// purgeDead rewrites the blocks holding removed chunks' postings for a
// batch of terms.
func (s *Store) purgeDead(kbID int64) error {
	if err := s.lockKeywords(kbID, true); err != nil {
		return err
	}
	var terms []string
	if err := s.db.Raw(`SELECT DISTINCT u FROM keyword_dead, unnest(terms) AS u WHERE kb_id = ? ORDER BY u LIMIT ?`,
		kbID, compactDeadTerms).Scan(&terms).Error; err != nil {
		return err
	}
	return s.rewriteTerms(kbID, terms)
}

func distinctSorted(ss []string) []string {
	var out []string
	for i, s := range ss {
		if i == 0 || s != ss[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// termWork is one term's change: new postings from the tail, removed
// chunks to drop, and the blocks they touch.
type termWork struct {
	added []keyword.Posting
	dead  map[int64]bool
	lo    int64 // the smallest id added or removed
	heads []keyword.Head
}

// rewriteTerms merges the tail postings of terms into their blocks and
// drops removed chunks from them, under the knowledge base's exclusive
// keyword lock.
func (s *Store) rewriteTerms(kbID int64, terms []string) error {
	terms, err := s.blocksFromTail(kbID, terms)
	if err != nil || len(terms) == 0 {
		return err
	}
	work := make(map[string]*termWork, len(terms))
	for _, t := range terms {
		work[t] = &termWork{dead: map[int64]bool{}, lo: 1<<63 - 1}
	}
	rows, err := s.db.Raw(`DELETE FROM keyword_tail WHERE kb_id = ? AND term = ANY(?) RETURNING term, chunk_id, tf, dl`,
		kbID, textArray(terms)).Rows()
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			term string
			p    keyword.Posting
		)
		if err := rows.Scan(&term, &p.ID, &p.TF, &p.DL); err != nil {
			rows.Close()
			return err
		}
		w := work[term]
		w.added, w.lo = append(w.added, p), min(w.lo, p.ID)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var dead []struct {
		ChunkID int64
		Term    string
	}
	if err := s.db.Raw(`SELECT d.chunk_id, u.term FROM keyword_dead d CROSS JOIN LATERAL unnest(d.terms) AS u(term)
		WHERE d.kb_id = ? AND u.term = ANY(?)`, kbID, textArray(terms)).Scan(&dead).Error; err != nil {
		return err
	}
	for _, d := range dead {
		w := work[d.Term]
		w.dead[d.ChunkID], w.lo = true, min(w.lo, d.ChunkID)
	}
	if err := s.db.Exec(`UPDATE keyword_dead SET terms = ARRAY(SELECT u FROM unnest(terms) AS u WHERE u <> ALL(?::text[]))
		WHERE kb_id = ? AND terms && ?::text[]`, textArray(terms), kbID, textArray(terms)).Error; err != nil {
		return err
	}
	if err := s.db.Exec("DELETE FROM keyword_dead WHERE kb_id = ? AND cardinality(terms) = 0", kbID).Error; err != nil {
		return err
	}
	if err := s.loadHeads(kbID, terms, work); err != nil {
		return err
	}
	return s.rebuildBlocks(kbID, terms, work)
}

// blocksFromTailSQL builds the blocks of terms that have none yet straight
// from their tail postings, in Postgres, as migrations/0007 built them from
// chunk_terms: after a bulk load into a new knowledge base that is every
// term, and nothing needs to travel to Go and back.
const blocksFromTailSQL = `
WITH moved AS (
	DELETE FROM keyword_tail WHERE kb_id = ? AND term = ANY(?) RETURNING term, chunk_id, tf, dl
), p AS (
	SELECT term, chunk_id, tf, dl, (row_number() OVER (PARTITION BY term ORDER BY chunk_id) - 1) / 128 AS blk FROM moved
), f AS (
	SELECT p.*, dl < coalesce(min(dl) OVER (PARTITION BY term, blk ORDER BY tf DESC, dl
		ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 2147483647) AS frontier
	FROM p
)
INSERT INTO keyword_blocks (kb_id, term, last_id, head, payload)
SELECT ?, term, max(chunk_id),
	int8send(max(chunk_id)) || int8send(min(chunk_id)) || int4send(count(*)::int)
		|| int4send((count(*) FILTER (WHERE frontier))::int)
		|| string_agg(int4send(tf) || int4send(dl), ''::bytea ORDER BY tf DESC) FILTER (WHERE frontier),
	string_agg(int8send(chunk_id) || int4send(tf) || int4send(dl), ''::bytea ORDER BY chunk_id)
FROM f GROUP BY term, blk`

// blocksFromTail moves the tail postings of the terms without blocks into
// new blocks and returns the other terms, which need a merge.
func (s *Store) blocksFromTail(kbID int64, terms []string) ([]string, error) {
	var old []string
	if err := s.db.Raw(`SELECT t FROM unnest(?::text[]) AS t
		WHERE EXISTS (SELECT 1 FROM keyword_blocks b WHERE b.kb_id = ? AND b.term = t)`, textArray(terms), kbID).
		Scan(&old).Error; err != nil {
		return nil, err
	}
	if len(old) == len(terms) {
		return terms, nil
	}
	merge := make(map[string]bool, len(old))
	for _, t := range old {
		merge[t] = true
	}
	var fresh []string
	for _, t := range terms {
		if !merge[t] {
			fresh = append(fresh, t)
		}
	}
	// A term without blocks has no removed postings either: keyword_dead
	// lists block postings only.
	return old, s.db.Exec(blocksFromTailSQL, kbID, textArray(fresh), kbID).Error
}

// loadHeads reads, per term, the heads of the blocks at or after its
// smallest changed id, and its last block (where ids after every block go).
func (s *Store) loadHeads(kbID int64, terms []string, work map[string]*termWork) error {
	los := make(intArray, len(terms))
	for i, t := range terms {
		los[i] = work[t].lo
	}
	rows, err := s.db.Raw(`SELECT x.term, b.head FROM unnest(?::text[], ?::int8[]) AS x(term, lo)
		CROSS JOIN LATERAL (SELECT head, last_id FROM keyword_blocks b WHERE b.kb_id = ? AND b.term = x.term
			AND b.last_id >= least(x.lo, (SELECT max(last_id) FROM keyword_blocks m WHERE m.kb_id = ? AND m.term = x.term))) b
		ORDER BY x.term, b.last_id`, textArray(terms), los, kbID, kbID).Rows()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			term string
			head []byte
		)
		if err := rows.Scan(&term, &head); err != nil {
			return err
		}
		hs, err := keyword.DecodeHeads(head)
		if err != nil {
			return err
		}
		work[term].heads = append(work[term].heads, hs...)
	}
	return rows.Err()
}

// rebuildBlocks rewrites, per term, each run of consecutive blocks that
// gains or loses postings. A posting goes to the first block whose last id
// is at least its id, or to the last block; a run ending at the last block
// is cut into full blocks (appends keep blocks full), any other run into
// equal ones.
func (s *Store) rebuildBlocks(kbID int64, terms []string, work map[string]*termWork) error {
	type run struct {
		keyword.Run
		term       string
		oldPayload [][]byte
	}
	var runs []*run
	for _, t := range terms {
		w := work[t]
		for _, r := range keyword.PlanRuns(w.heads, w.added, w.dead) {
			runs = append(runs, &run{Run: r, term: t})
		}
	}
	// Fetch the payloads of every block to rewrite, then replace them.
	var delTerms textArray
	var delLasts intArray
	for _, r := range runs {
		for i := r.From; i <= r.To; i++ {
			delTerms, delLasts = append(delTerms, r.term), append(delLasts, work[r.term].heads[i].Last)
		}
	}
	if len(delTerms) > 0 {
		type blockKey struct {
			term string
			last int64
		}
		payloads := map[blockKey][]byte{}
		rows, err := s.db.Raw(`DELETE FROM keyword_blocks b USING unnest(?::text[], ?::int8[]) AS x(term, last_id)
			WHERE b.kb_id = ? AND b.term = x.term AND b.last_id = x.last_id RETURNING b.term, b.last_id, b.payload`,
			delTerms, delLasts, kbID).Rows()
		if err != nil {
			return err
		}
		for rows.Next() {
			var (
				k       blockKey
				payload []byte
			)
			if err := rows.Scan(&k.term, &k.last, &payload); err != nil {
				rows.Close()
				return err
			}
			payloads[k] = payload
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, r := range runs {
			for i := r.From; i <= r.To; i++ {
				p, ok := payloads[blockKey{r.term, work[r.term].heads[i].Last}]
				if !ok {
					return errors.New("keyword compaction: a block vanished under the lock")
				}
				r.oldPayload = append(r.oldPayload, p)
			}
		}
	}
	var out blockWriter
	for _, r := range runs {
		blocks, err := keyword.Rewrite(r.Run, r.oldPayload, work[r.term].dead)
		if err != nil {
			return err
		}
		for _, part := range blocks {
			if err := out.add(s, kbID, r.term, part); err != nil {
				return err
			}
		}
	}
	return out.flush(s)
}

// blockWriter inserts blocks in multi-row statements.
type blockWriter struct {
	sb   strings.Builder
	args []any
	n    int
}

const blockBatch = 1000

func (w *blockWriter) add(s *Store, kbID int64, term string, ps []keyword.Posting) error {
	head, payload := keyword.EncodeBlock(ps)
	if w.n > 0 {
		w.sb.WriteByte(',')
	}
	w.sb.WriteString("(?,?,?,?,?)")
	w.args = append(w.args, kbID, term, ps[len(ps)-1].ID, head, payload)
	if w.n++; w.n == blockBatch {
		return w.flush(s)
	}
	return nil
}

func (w *blockWriter) flush(s *Store) error {
	if w.n == 0 {
		return nil
	}
	err := s.db.Exec("INSERT INTO keyword_blocks (kb_id, term, last_id, head, payload) VALUES "+w.sb.String(), w.args...).Error
	w.sb.Reset()
	w.args, w.n = w.args[:0], 0
	return err
}
