package repository

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// BenchmarkKeywordSearch times the block-max keyword search against the
// exhaustive SQL it replaced (kept in keyword_migrate_test.go, over a
// chunk_terms table built from the same postings) on a synthetic corpus:
// RAGENT_BENCH_CHUNKS chunks (default 50000) of 40–120 tokens from a Zipf
// vocabulary of 50k words, ingested through ReplaceChunks in documents of
// 100 chunks and then compacted; queries of 1–4 terms drawn from random
// chunks. It reports p50/p99 per query, ingestion chunks/s, and index bytes
// per posting.
//
//	RAGENT_REQUIRE_SERVICES=1 RAGENT_BENCH_CHUNKS=200000 go test -run '^$' -bench KeywordSearch -benchtime 1x -timeout 60m ./repository/
func BenchmarkKeywordSearch(b *testing.B) {
	n := 50000
	if v := os.Getenv("RAGENT_BENCH_CHUNKS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	s := benchStore(b)
	rng := rand.New(rand.NewSource(1))
	var built []int64
	if err := s.db.Raw("SELECT id FROM knowledge_bases WHERE name = 'bench' AND to_regclass('chunk_terms') IS NOT NULL").
		Scan(&built).Error; err != nil {
		b.Fatal(err)
	}
	var kbID service.ID
	if len(built) == 1 {
		kbID = service.ID(built[0])
	} else {
		kbID = buildBenchCorpus(b, s, rng, n)
	}
	var sample []struct{ Terms string }
	if err := s.db.Raw("SELECT terms FROM keyword_docs WHERE chunk_id % 97 = 0").
		Scan(&sample).Error; err != nil {
		b.Fatal(err)
	}
	var queries []service.KeywordQuery
	for i := 0; i < 200; i++ {
		tokens := strings.Fields(sample[rng.Intn(len(sample))].Terms)
		terms := make([]string, 1+rng.Intn(4))
		for j := range terms {
			terms[j] = tokens[rng.Intn(len(tokens))]
		}
		terms = distinctSorted(sortedCopy(terms))
		counts := make([]int, len(terms))
		for j := range counts {
			counts[j] = 1
		}
		queries = append(queries, service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kbID}, Terms: termCounts(terms, counts),
			K1: 1.2, B: 0.75, Limit: 10})
	}
	oldStats := `SELECT coalesce(sum(chunks), 0)::float8 AS n,
		coalesce(sum(terms), 0)::float8 / greatest(coalesce(sum(chunks), 0), 1) AS avgdl FROM keyword_stats WHERE kb_id = ANY(?)`
	for _, mode := range []string{"blockmax", "exhaustive"} {
		b.Run(mode, func(b *testing.B) {
			var lat []time.Duration
			for i := 0; i < b.N; i++ {
				for _, q := range queries {
					t0 := time.Now()
					if mode == "blockmax" {
						if _, err := s.KeywordSearch(ctx, q); err != nil {
							b.Fatal(err)
						}
					} else {
						oldKeywordSearch(b, s, oldStats, q)
					}
					lat = append(lat, time.Since(t0))
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// buildBenchCorpus ingests n chunks through ReplaceChunks, copies their
// postings into an old-style chunk_terms table and compacts the new index.
func buildBenchCorpus(b *testing.B, s *Store, rng *rand.Rand, n int) service.ID {
	ctx := context.Background()
	zipf := rand.NewZipf(rng, 1.05, 1, 50000)
	kb := &service.KnowledgeBase{ID: service.ID(rng.Int63n(1 << 40)), Name: "bench", EmbeddingModel: "m", EmbeddingDim: 4,
		ChunkSize: 512, ChunkOverlap: 64, VectorWeight: 1}
	if err := s.CreateKnowledgeBase(ctx, kb); err != nil {
		b.Fatal(err)
	}
	var (
		nextID  = int64(1 << 41)
		started = time.Now()
		err     error
	)
	for done := 0; done < n; {
		nextID++
		d := &service.Document{ID: service.ID(nextID), KnowledgeBaseID: kb.ID, Name: "d", Mime: "text/plain", Size: 1,
			SHA256: fmt.Sprintf("%064x", nextID)}
		if err := s.CreateUpload(ctx, d, []byte{1}, service.OutboxMessage{}); err != nil {
			b.Fatal(err)
		}
		cs := make([]service.Chunk, min(100, n-done))
		for i := range cs {
			tokens := make([]string, 40+rng.Intn(81))
			for j := range tokens {
				tokens[j] = "w" + strconv.FormatUint(zipf.Uint64(), 10)
			}
			nextID++
			cs[i] = chunk(i, "c", []float32{1, 0, 0, 0}, tokens...)
			cs[i].ID = service.ID(nextID)
		}
		if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(b, s, d.ID), cs); err != nil {
			b.Fatal(err)
		}
		done += len(cs)
	}
	ingest := time.Since(started)
	// The old index, from the same postings, before compaction empties the tail.
	for _, sql := range []string{
		`CREATE TABLE chunk_terms (term text NOT NULL, kb_id bigint NOT NULL, chunk_id bigint NOT NULL,
			tf integer NOT NULL, dl integer NOT NULL, PRIMARY KEY (term, kb_id, chunk_id) INCLUDE (tf, dl))`,
		`INSERT INTO chunk_terms SELECT term, kb_id, chunk_id, tf, dl FROM keyword_tail`,
		`CREATE INDEX chunk_terms_chunk ON chunk_terms (chunk_id)`,
	} {
		if err := s.db.Exec(sql).Error; err != nil {
			b.Fatal(err)
		}
	}
	started = time.Now()
	for more := true; more; {
		if more, err = s.CompactKeywords(ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
	compact := time.Since(started)
	if err := s.ShrinkKeywordTail(ctx, 0); err != nil {
		b.Fatal(err)
	}
	if err := s.db.Exec("VACUUM ANALYZE").Error; err != nil {
		b.Fatal(err)
	}
	var size struct{ Postings, Old, New, Docs int64 }
	if err := s.db.Raw(`SELECT (SELECT count(*) FROM chunk_terms) AS postings,
		pg_total_relation_size('chunk_terms') AS old,
		pg_total_relation_size('keyword_blocks') + pg_total_relation_size('keyword_tail') + pg_total_relation_size('keyword_docs')
			+ pg_total_relation_size('keyword_dead') + pg_total_relation_size('keyword_stats') AS new,
		pg_total_relation_size('keyword_docs') AS docs`).Scan(&size).Error; err != nil {
		b.Fatal(err)
	}
	fmt.Printf("%d chunks, %d postings: ingest %.0f chunks/s, compaction %s; bytes/posting: new %.1f (of which keyword_docs %.1f), old %.1f",
		n, size.Postings, float64(n)/ingest.Seconds(), compact.Round(time.Millisecond),
		float64(size.New)/float64(size.Postings), float64(size.Docs)/float64(size.Postings), float64(size.Old)/float64(size.Postings))
	fmt.Println()

	return kb.ID
}

// benchStore opens the benchmarks' database, migrated: the one of
// RAGENT_BENCH_DATABASE_URL (built once and reused) or a fresh one. It is
// closed when b ends.
func benchStore(b *testing.B) *Store {
	url := os.Getenv("RAGENT_BENCH_DATABASE_URL")
	if url == "" {
		url = testenv.FreshDatabase(b)
	}
	s, err := Open(context.Background(), url, Config{MaxOpenConns: 4})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}
