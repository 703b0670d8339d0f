package repository

import (
	"context"
	"errors"
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
	if len(chunks) == 0 || !s.keywordsKept() {
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
	if !s.keywordsKept() {
		return nil
	}
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

// keywordIndexSetting is the settings row that says the keyword index has
// not been kept since some moment (its value "stale"): an instance on the
// OpenSearch backend stopped writing it (SkipKeywordIndex), and it misses
// the chunks added and still holds those removed since. Only
// RebuildKeywordIndex removes the row.
const keywordIndexSetting = "keyword_index"

// keywordsKept says chunk writes maintain the keyword index.
func (s *Store) keywordsKept() bool { return s.search == nil || !s.search.noKeywords }

// SkipKeywordIndex stops maintaining the keyword index: with a search
// engine serving keyword search (RAGENT_SEARCH_BACKEND=opensearch, after
// UseSearchIndex) nothing searches it, and its postings, term lists and
// statistics cost Postgres work in every commit of chunks. The index is
// recorded stale first, so an instance on the Postgres backend rebuilds it
// (KeywordIndexStale, RebuildKeywordIndex) before it searches it again.
// Call it before the store is shared.
func (s *Store) SkipKeywordIndex(ctx context.Context) error {
	if s.search == nil {
		return fmt.Errorf("%w: the keyword index is skipped only with a search engine (UseSearchIndex)", service.ErrInvalid)
	}
	if err := s.conn(ctx).Exec(`INSERT INTO settings (key, value) VALUES (?, 'stale')
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, keywordIndexSetting).Error; err != nil {
		return translate(err)
	}
	s.search.noKeywords = true
	return nil
}

// KeywordIndexStale says the keyword index was not kept for a while
// (SkipKeywordIndex) and has not been rebuilt since.
func (s *Store) KeywordIndexStale(ctx context.Context) (bool, error) {
	_, err := s.Setting(ctx, keywordIndexSetting)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, service.ErrNotFound) {
		return false, nil
	}
	return false, err
}

// rebuildBatch is the chunks read per statement by RebuildKeywordIndex.
const rebuildBatch = 1000

// RebuildKeywordIndex builds the keyword index again from the chunks, in
// one transaction, and clears its stale mark; it returns the chunks
// indexed. terms makes a chunk's keyword terms (with their frequencies)
// and their total from its content and section, as ingestion does.
//
// The transaction first locks the chunks table against every change (reads
// go on), so no writer is between its chunk write and its keyword write:
// each of them writes chunks before the keyword index or, as curation,
// locks the chunk's row first. Then it takes the compactor's lock and
// replaces the whole index. Searches meanwhile read the old index; the
// new one is theirs at the commit.
func (s *Store) RebuildKeywordIndex(ctx context.Context, terms func(content, section string) (map[string]int, int)) (int, error) {
	n := 0
	err := s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.db.Exec("LOCK TABLE chunks IN EXCLUSIVE MODE").Error; err != nil {
			return translate(err)
		}
		if err := tx.db.Exec("SELECT pg_advisory_xact_lock(?)", keywordCompactLock).Error; err != nil {
			return translate(err)
		}
		for _, table := range []string{"keyword_blocks", "keyword_tail", "keyword_docs", "keyword_dead", "keyword_stats"} {
			if err := tx.db.Exec("DELETE FROM " + table).Error; err != nil {
				return translate(err)
			}
		}
		if tx.search != nil {
			// The rebuild is the index's, whatever this store skips.
			tx.search = &searchIndex{nextID: tx.search.nextID, vectors: tx.search.vectors}
		}
		var after int64
		for {
			var rows []struct {
				ID, KbID         int64
				Content, Section string
			}
			if err := tx.db.Raw(`SELECT id, kb_id, content, section FROM chunks WHERE enabled AND id > ? ORDER BY id LIMIT ?`,
				after, rebuildBatch).Scan(&rows).Error; err != nil {
				return translate(err)
			}
			if len(rows) == 0 {
				break
			}
			byKB := map[int64][]service.Chunk{}
			for _, r := range rows {
				tf, total := terms(r.Content, r.Section)
				byKB[r.KbID] = append(byKB[r.KbID], service.Chunk{ID: service.ID(r.ID), Terms: tf, TermCount: total})
			}
			for kb, chunks := range byKB {
				if err := tx.indexChunks(kb, chunks); err != nil {
					return err
				}
			}
			n += len(rows)
			after = rows[len(rows)-1].ID
		}
		return translate(tx.db.Exec("DELETE FROM settings WHERE key = ?", keywordIndexSetting).Error)
	})
	return n, err
}
