package repository

import (
	"fmt"
	"strings"

	"github.com/ragent-go/ragent/service"
)

// Writes to the keyword index. New postings go to keyword_tail in one
// statement per document; the compactor (keyword_compact.go) moves them
// into blocks. Only removal and compaction touch the same rows, and they
// are ordered by a per-knowledge-base advisory lock: removals share it, the
// compactor takes it alone, so neither can deadlock the other on tail rows
// and a removal always knows whether a chunk's postings are in the tail or
// in blocks. Adding chunks takes no lock at all.

// keywordLockClass is the first key of the per-knowledge-base advisory locks
// ("kw"); the second is a hash of the knowledge base id, so two knowledge
// bases may share a lock, which only costs a wait.
const keywordLockClass = 0x6b77

// lockKeywords takes the knowledge base's keyword lock until the end of the
// transaction, shared or exclusive.
func (s *Store) lockKeywords(kbID int64, exclusive bool) error {
	fn := "pg_advisory_xact_lock_shared"
	if exclusive {
		fn = "pg_advisory_xact_lock"
	}
	return translate(s.db.Exec("SELECT "+fn+"(?, hashint8(?))", keywordLockClass, kbID).Error)
}

// indexChunks adds the chunks' postings to the tail, their term lists to
// keyword_docs (one string, the terms separated by spaces: migration 0011)
// and their share to the statistics, in two statements whatever the number
// of chunks. A chunk id may come back after its removal
// (its stale block postings stay listed in keyword_dead, which applies to
// block postings only), so nothing here assumes ids are fresh.
func (s *Store) indexChunks(kbID int64, chunks []service.Chunk) error {
	if len(chunks) == 0 {
		return nil
	}
	var (
		ids, tfs, dls intArray
		terms         textArray
		termTotal     int64
	)
	for _, c := range chunks {
		termTotal += int64(c.TermCount)
		for term, tf := range c.Terms {
			if strings.ContainsRune(term, ' ') {
				return fmt.Errorf("%w: keyword term %q holds a space", service.ErrInvalid, term)
			}
			ids, terms = append(ids, int64(c.ID)), append(terms, term)
			tfs, dls = append(tfs, int64(tf)), append(dls, int64(c.TermCount))
		}
	}
	if len(ids) > 0 {
		if err := s.db.Exec(`WITH p AS (
				SELECT * FROM unnest(?::int8[], ?::text[], ?::int4[], ?::int4[]) AS p(chunk_id, term, tf, dl)
			), t AS (
				INSERT INTO keyword_tail (kb_id, term, chunk_id, tf, dl) SELECT ?, term, chunk_id, tf, dl FROM p
			)
			INSERT INTO keyword_docs (chunk_id, kb_id, terms) SELECT chunk_id, ?, string_agg(term, ' ') FROM p GROUP BY chunk_id`,
			ids, terms, tfs, dls, kbID, kbID).Error; err != nil {
			return translate(err)
		}
	}
	return translate(s.db.Exec("INSERT INTO keyword_stats (kb_id, chunks, terms) VALUES (?, ?, ?)",
		kbID, len(chunks), termTotal).Error)
}

// unindexChunks takes removed chunks out of the keyword index: their tail
// postings are deleted, their postings in blocks are listed in
// keyword_dead (queries skip them and subtract them from df until the
// compactor rewrites those blocks), and their share of the statistics is
// subtracted.
func (s *Store) unindexChunks(kbID int64, ids intArray, chunks, terms int64) error {
	if err := s.lockKeywords(kbID, false); err != nil {
		return err
	}
	if err := s.db.Exec(`WITH gone AS (
			DELETE FROM keyword_docs WHERE chunk_id = ANY(?::int8[]) RETURNING chunk_id, kb_id, terms
		), tail AS (
			DELETE FROM keyword_tail WHERE chunk_id = ANY(?::int8[]) RETURNING chunk_id, term
		)
		INSERT INTO keyword_dead (kb_id, chunk_id, terms)
		SELECT g.kb_id, g.chunk_id, array_agg(u.term) FROM gone g CROSS JOIN LATERAL unnest(string_to_array(g.terms, ' ')) AS u(term)
		LEFT JOIN tail ON tail.chunk_id = g.chunk_id AND tail.term = u.term
		WHERE tail.term IS NULL GROUP BY g.kb_id, g.chunk_id
		ON CONFLICT (kb_id, chunk_id) DO UPDATE
			SET terms = ARRAY(SELECT DISTINCT u FROM unnest(keyword_dead.terms || excluded.terms) AS u)`, ids, ids).Error; err != nil {
		return translate(err)
	}
	return translate(s.db.Exec("INSERT INTO keyword_stats (kb_id, chunks, terms) VALUES (?, ?, ?)",
		kbID, -chunks, -terms).Error)
}

// dropKeywordIndex removes a deleted knowledge base's whole keyword index.
func (s *Store) dropKeywordIndex(kbID int64) error {
	if err := s.lockKeywords(kbID, true); err != nil {
		return err
	}
	for _, table := range []string{"keyword_blocks", "keyword_tail", "keyword_docs", "keyword_dead", "keyword_stats"} {
		if err := s.db.Exec("DELETE FROM "+table+" WHERE kb_id = ?", kbID).Error; err != nil {
			return translate(err)
		}
	}
	return nil
}
