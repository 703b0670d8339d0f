package llm

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// OfflineEmbeddingModel is the model name the offline embedder reports; a
// knowledge base records it so its vectors are never mixed with another
// model's.
const OfflineEmbeddingModel = "offline-hash-v1"

// offlineEmbedder hashes the tokenizer's terms into a fixed number of
// signed buckets (the "hashing trick"). It knows no synonyms, so it is weak
// next to a trained model, but it is deterministic, needs no network, and
// shares BM25's terms, which is what the offline mode needs.
type offlineEmbedder struct{ dim int }

func newOfflineEmbedder(dim int) *offlineEmbedder {
	if dim <= 0 {
		dim = DefaultEmbeddingDim
	}
	return &offlineEmbedder{dim: dim}
}

func (e *offlineEmbedder) Model() string { return OfflineEmbeddingModel }
func (e *offlineEmbedder) Dim() int      { return e.dim }

// Embed implements service.Embedder. Queries and documents are hashed
// alike. A text without any term (only punctuation, say) gets the zero
// vector, which has no direction: cosine search cannot place it, and
// pgvector leaves it out of a cosine index.
func (e *offlineEmbedder) Embed(ctx context.Context, _ service.EmbedKind, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		out[i] = e.vector(t)
	}
	return out, nil
}

func (e *offlineEmbedder) vector(s string) []float32 {
	terms := text.Tokenize(s)
	// Count in order of first appearance: summing floats in map order
	// would make the last bits of the vector differ from run to run.
	tf := make(map[string]int, len(terms))
	unique := make([]string, 0, len(terms))
	for _, t := range terms {
		if tf[t] == 0 {
			unique = append(unique, t)
		}
		tf[t]++
	}
	acc := make([]float64, e.dim)
	for _, t := range unique {
		h := fnv1a(t)
		// Sublinear tf keeps one repeated word from dominating; the sign
		// bit makes colliding terms cancel on average instead of adding up.
		w := 1 + math.Log(float64(tf[t]))
		if h>>63 == 1 {
			w = -w
		}
		acc[h%uint64(e.dim)] += w
	}
	var norm float64
	for _, x := range acc {
		norm += x * x
	}
	v := make([]float32, e.dim)
	if norm == 0 {
		return v
	}
	norm = math.Sqrt(norm)
	for i, x := range acc {
		v[i] = float32(x / norm)
	}
	return v
}

// fnv1a is 64-bit FNV-1a over the bytes of s, without the allocation that
// hash/fnv's Write([]byte(s)) costs.
func fnv1a(s string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	return h
}

// offlineChat answers without a model: it quotes the sentences of the
// request's sources that share the most terms with the question, each with
// its [n] citation. It cannot reason or chat, and says so when there is
// nothing to quote.
type offlineChat struct {
	delay time.Duration // pause between deltas, for demos
}

const (
	offlineRunesPerDelta = 4
	offlineMaxQuotes     = 3
	offlineQuotesPerSrc  = 2
	offlineMaxQuoteRunes = 320
	offlineNoSourcesEN   = "I found no relevant documents for your question. I am ragent's offline model, so I can only quote documents and cannot answer on my own."
	offlineNoSourcesZH   = "没有找到与您的问题相关的文档。当前是 ragent 的离线模型，只能引用文档内容，无法自行回答。"
	offlineIntroEN       = "Here is what the documents say:\n\n"
	offlineIntroZH       = "根据检索到的文档：\n\n"
	offlineJSONAnswer    = "{}"
)

// Stream implements service.ChatModel. It streams the answer a few runes at
// a time and stops as soon as ctx is cancelled, returning ctx.Err() and
// the usage of what was sent.
func (m *offlineChat) Stream(ctx context.Context, req service.ChatRequest, onDelta func(service.Delta) error) (service.Usage, error) {
	answer := offlineAnswer(req)
	sent := 0 // bytes of answer delivered
	for sent < len(answer) {
		if err := ctx.Err(); err != nil {
			return estimateUsage(req.Messages, answer[:sent]), err
		}
		if m.delay > 0 && sent > 0 {
			if err := sleep(ctx, m.delay); err != nil {
				return estimateUsage(req.Messages, answer[:sent]), err
			}
		}
		end := sent
		for n := 0; n < offlineRunesPerDelta && end < len(answer); n++ {
			_, size := utf8.DecodeRuneInString(answer[end:])
			end += size
		}
		if err := onDelta(service.Delta{Kind: service.DeltaResponse, Text: answer[sent:end]}); err != nil {
			return estimateUsage(req.Messages, answer[:sent]), err
		}
		sent = end
	}
	return estimateUsage(req.Messages, answer), nil
}

// offlineAnswer builds the whole answer before streaming it.
func offlineAnswer(req service.ChatRequest) string {
	if req.JSON {
		// Classification offline is lexical (the chat pipeline's job); an
		// empty object is valid JSON that scores nothing.
		return offlineJSONAnswer
	}
	question := offlineQuestion(req)
	chinese := containsCJK(question)
	quotes := bestQuotes(question, req.Sources)
	if len(quotes) == 0 {
		if chinese {
			return offlineNoSourcesZH
		}
		return offlineNoSourcesEN
	}
	var b strings.Builder
	if chinese {
		b.WriteString(offlineIntroZH)
	} else {
		b.WriteString(offlineIntroEN)
	}
	for _, q := range quotes {
		b.WriteString("- ")
		b.WriteString(q.text)
		b.WriteString(" [")
		b.WriteString(strconv.Itoa(q.source))
		b.WriteString("]\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// offlineQuestion is the last user message with the sources' contents cut
// out: the chat pipeline's prompt embeds the sources next to the question,
// and matching sentences against their own text would score every one.
func offlineQuestion(req service.ChatRequest) string {
	var q string
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == service.ChatUser {
			q = req.Messages[i].Content
			break
		}
	}
	for _, s := range req.Sources {
		if s.Content != "" {
			q = strings.ReplaceAll(q, s.Content, " ")
		}
		if s.Excerpt != "" {
			q = strings.ReplaceAll(q, s.Excerpt, " ")
		}
	}
	return q
}

type quote struct {
	source   int // the Source.Index cited
	rank     int // position of the source in the request
	position int // sentence number inside the source
	score    float64
	text     string
}

// bestQuotes picks up to offlineMaxQuotes sentences, at most
// offlineQuotesPerSrc from one source, by the share of question terms they
// contain, and returns them in source order then reading order. When no
// sentence shares a term (a paraphrased question), retrieval still ranked
// the first source best, so its opening sentence is quoted.
func bestQuotes(question string, sources []service.Source) []quote {
	qterms := make(map[string]bool)
	for _, t := range text.Tokenize(question) {
		qterms[t] = true
	}
	var all []quote
	for rank, src := range sources {
		body := src.Content
		if body == "" {
			body = src.Excerpt
		}
		for pos, sent := range text.Sentences(body) {
			terms := text.Tokenize(sent)
			if len(terms) == 0 {
				continue // a heading number, a lone symbol
			}
			seen := make(map[string]bool, len(terms))
			matched := 0
			for _, t := range terms {
				if !seen[t] {
					seen[t] = true
					if qterms[t] {
						matched++
					}
				}
			}
			// Dividing by the root of the sentence's length favours focused
			// sentences without letting a two-word one win on luck.
			score := float64(matched) / math.Sqrt(float64(len(seen)))
			all = append(all, quote{source: src.Index, rank: rank, position: pos, score: score, text: clip(sent)})
		}
	}
	if len(all) == 0 {
		return nil
	}
	ranked := slices.Clone(all)
	slices.SortStableFunc(ranked, func(a, b quote) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return a.rank - b.rank
	})
	var picked []quote
	perSource := make(map[int]int)
	for _, q := range ranked {
		if q.score == 0 || len(picked) == offlineMaxQuotes {
			break
		}
		if perSource[q.rank] == offlineQuotesPerSrc {
			continue
		}
		perSource[q.rank]++
		picked = append(picked, q)
	}
	if len(picked) == 0 {
		return all[:1]
	}
	slices.SortFunc(picked, func(a, b quote) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return a.position - b.position
	})
	return picked
}

// clip shortens a very long sentence (a table row, a run-on line) so the
// answer stays readable.
func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= offlineMaxQuoteRunes {
		return s
	}
	r := []rune(s)
	return string(r[:offlineMaxQuoteRunes]) + "…"
}

func containsCJK(s string) bool {
	for _, r := range s {
		if text.IsCJK(r) {
			return true
		}
	}
	return false
}
