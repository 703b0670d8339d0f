package retrieve

// The tuned defaults of Config and of a knowledge base's vector weight,
// per kind of embedder. Measured with `ragent eval` on SciFact and the
// Chinese set: BENCHMARKS.md, "Retrieval and ingestion (ragent eval)" and
// "Semantic retrieval with the local model" (docs/benchmarks/).

// EmbedderKind is what the defaults depend on: the offline hashing
// embedder, the local model (multilingual-e5-small) or another model.
type EmbedderKind int

const (
	// OtherEmbedder is a model whose cosine range was not measured.
	OtherEmbedder EmbedderKind = iota
	// OfflineEmbedder is the hashing embedder (no model).
	OfflineEmbedder
	// LocalEmbedder is the local model, multilingual-e5-small.
	LocalEmbedder
)

// OfflineVectorWeight is the hybrid weight of the vector list for knowledge
// bases embedded by the offline hashing embedder. That embedder hashes the
// same terms BM25 scores, so its list carries no signal BM25 lacks, only
// noise: measured with `ragent eval` (BENCHMARKS.md, "The offline vector
// weight"), every weight from 0.02 up lowered nDCG@10 on at least one eval
// set (0.3: SciFact 0.676 → 0.620, CMRC 0.986 → 0.954). At 0.005 the
// largest boost a vector rank gives, 0.005/(60+1), is smaller than the
// smallest gap between two adjacent keyword ranks of a 50-candidate RRF
// list, 1/(60+49) − 1/(60+50): fusion keeps BM25's order, vector search
// only breaks exact ties and appends the chunks BM25 missed, so hybrid
// never ranks below keyword.
const OfflineVectorWeight = 0.005

// OfflineMinVectorScore is the relevance gate for chunks found only by the
// offline embedder: related texts score about 0.25 (Chinese) to 0.55
// (English), unrelated ones about 0 (llm package tests), and a gate of 0.2
// to 0.5 left SciFact's hybrid nDCG@10 within 0.005 (BENCHMARKS.md).
const OfflineMinVectorScore = 0.15

// LocalMinVectorScore is the relevance gate for the local model
// (multilingual-e5-small), whose cosines crowd into 0.7–0.95: measured with
// its vectors of the Chinese eval set (BENCHMARKS.md, "Semantic retrieval
// with the local model"), every question's relevant paragraph scored at
// least 0.84 when vector search found it at all, while the best paragraph
// for each of SciFact's 300 English claims (about nothing in that set)
// scored 0.75–0.81, and unrelated questions to the demo 0.72–0.79. So at
// 0.82 a question about nothing in a knowledge base gets no vector hits
// ("no relevant documents" in chat) and no relevant hit is lost. It does
// not tell a relevant paragraph from an unrelated one on the same subject:
// those score 0.86 too.
const LocalMinVectorScore = 0.82

// DefaultMinVectorScore is Config.MinVectorScore when none is configured:
// the offline embedder's and the local model's are measured; another
// model's cosine range is unknown, so it has none.
func DefaultMinVectorScore(k EmbedderKind) float64 {
	switch k {
	case OfflineEmbedder:
		return OfflineMinVectorScore
	case LocalEmbedder:
		return LocalMinVectorScore
	}
	return 0
}

// DefaultFusion is Config.Fusion when none is configured: the offline
// embedder's list is fused by rank with a weight that cannot reorder BM25
// (OfflineVectorWeight); a trained model's by score, which measured better
// than every RRF setting with the local model (BENCHMARKS.md).
func DefaultFusion(k EmbedderKind) Fusion {
	if k == OfflineEmbedder {
		return FusionRRF
	}
	return FusionConvex
}

// DefaultVectorWeight is a new knowledge base's vector weight.
func DefaultVectorWeight(k EmbedderKind) float64 {
	if k == OfflineEmbedder {
		return OfflineVectorWeight
	}
	return 1
}
