package llm

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

func offlineEmbedderFor(t *testing.T, dim int) service.Embedder {
	t.Helper()
	e, err := NewEmbedder(Config{EmbeddingDim: dim})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

func TestOfflineEmbedderShape(t *testing.T) {
	e := offlineEmbedderFor(t, 0)
	if e.Model() != "offline-hash-v1" || e.Dim() != 512 {
		t.Fatalf("model %q dim %d, want offline-hash-v1 512", e.Model(), e.Dim())
	}
	texts := []string{"Vitamin D deficiency increases fracture risk.", "维生素D缺乏会增加骨折风险。", "!!! ???"}
	first, err := e.Embed(context.Background(), service.EmbedDocument, texts)
	if err != nil {
		t.Fatal(err)
	}
	second, err := offlineEmbedderFor(t, 0).Embed(context.Background(), service.EmbedDocument, texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range first {
		if len(v) != 512 {
			t.Fatalf("text %d: %d dimensions", i, len(v))
		}
		for j := range v {
			if v[j] != second[i][j] {
				t.Fatalf("text %d differs between embedders at %d: %v vs %v", i, j, v[j], second[i][j])
			}
		}
	}
	for i := range 2 {
		var norm float64
		for _, x := range first[i] {
			norm += float64(x) * float64(x)
		}
		if math.Abs(norm-1) > 1e-5 {
			t.Errorf("text %d: squared norm %v, want 1", i, norm)
		}
	}
	for _, x := range first[2] {
		if x != 0 {
			t.Fatalf("a text without terms must embed to the zero vector, got %v", first[2])
		}
	}

	small, err := offlineEmbedderFor(t, 64).Embed(context.Background(), service.EmbedDocument, texts[:1])
	if err != nil {
		t.Fatal(err)
	}
	if len(small[0]) != 64 {
		t.Fatalf("configured dim 64, got %d", len(small[0]))
	}
}

func TestOfflineEmbedderSimilarity(t *testing.T) {
	tests := []struct {
		name                    string
		query, similar, distant string
	}{
		{
			name:    "english",
			query:   "How does vitamin D deficiency affect bone fractures?",
			similar: "Vitamin D deficiency is associated with a higher risk of bone fracture in elderly patients.",
			distant: "The stock market closed higher after the central bank kept interest rates unchanged.",
		},
		{
			name:    "chinese",
			query:   "如何申请年假？",
			similar: "员工申请年假需要提前三天在系统中提交申请，并由部门经理审批。",
			distant: "本季度公司服务器的平均响应时间下降了百分之二十。",
		},
	}
	e := offlineEmbedderFor(t, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := e.Embed(context.Background(), service.EmbedDocument, []string{tt.query, tt.similar, tt.distant})
			if err != nil {
				t.Fatal(err)
			}
			sim, dist := cosine(v[0], v[1]), cosine(v[0], v[2])
			if sim <= dist || sim < 0.2 {
				t.Fatalf("cos(query, similar) = %.3f, cos(query, distant) = %.3f", sim, dist)
			}
		})
	}
}

func TestOfflineEmbedderCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := offlineEmbedderFor(t, 0).Embed(ctx, service.EmbedDocument, []string{"a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// collect streams req and returns the deltas.
func collect(t *testing.T, ctx context.Context, m service.ChatModel, req service.ChatRequest) ([]service.Delta, service.Usage, error) {
	t.Helper()
	var deltas []service.Delta
	usage, err := m.Stream(ctx, req, func(d service.Delta) error {
		deltas = append(deltas, d)
		return nil
	})
	return deltas, usage, err
}

func joined(deltas []service.Delta, kind service.DeltaKind) string {
	var b strings.Builder
	for _, d := range deltas {
		if d.Kind == kind {
			b.WriteString(d.Text)
		}
	}
	return b.String()
}

func TestOfflineChatAnswers(t *testing.T) {
	sources := []service.Source{
		{Index: 1, Content: "Ragent is a RAG backend written in Go. It streams answers over server-sent events. The fair queue limits concurrent LLM calls across instances."},
		{Index: 2, Content: "Documents are parsed, chunked and embedded by the ingestion worker. Weather today is sunny."},
	}
	zhSources := []service.Source{
		{Index: 1, Content: "员工每年享有十天带薪年假。申请年假需要提前三天提交。"},
	}
	prompt := func(q string, srcs []service.Source) []service.ChatMessage {
		var b strings.Builder
		b.WriteString("Answer from the sources.\n")
		for _, s := range srcs {
			b.WriteString("[" + string(rune('0'+s.Index)) + "] " + s.Content + "\n")
		}
		b.WriteString("Question: " + q)
		return []service.ChatMessage{{Role: "system", Content: "You are ragent."}, {Role: "user", Content: b.String()}}
	}
	tests := []struct {
		name     string
		req      service.ChatRequest
		contains []string
		absent   []string
	}{
		{
			name:     "quotes the matching sentences with citations",
			req:      service.ChatRequest{Messages: prompt("How does the fair queue limit LLM calls?", sources), Sources: sources},
			contains: []string{"The fair queue limits concurrent LLM calls across instances. [1]"},
			absent:   []string{"Weather"},
		},
		{
			name:     "cites the second source",
			req:      service.ChatRequest{Messages: prompt("Who embeds the documents?", sources), Sources: sources},
			contains: []string{"embedded by the ingestion worker. [2]"},
		},
		{
			name:     "chinese question",
			req:      service.ChatRequest{Messages: prompt("年假需要提前多久申请？", zhSources), Sources: zhSources},
			contains: []string{"根据检索到的文档", "申请年假需要提前三天提交。 [1]"},
		},
		{
			name:     "no sources in english",
			req:      service.ChatRequest{Messages: []service.ChatMessage{{Role: "user", Content: "What is the meaning of life?"}}},
			contains: []string{"no relevant documents", "offline model"},
		},
		{
			name:     "no sources in chinese",
			req:      service.ChatRequest{Messages: []service.ChatMessage{{Role: "user", Content: "今天天气怎么样？"}}},
			contains: []string{"没有找到", "离线模型"},
		},
		{
			name:     "json request",
			req:      service.ChatRequest{JSON: true, Messages: []service.ChatMessage{{Role: "user", Content: "classify"}}},
			contains: []string{"{}"},
		},
	}
	m := chatFor(t, Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deltas, usage, err := collect(t, context.Background(), m, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			answer := joined(deltas, service.DeltaResponse)
			for _, s := range tt.contains {
				if !strings.Contains(answer, s) {
					t.Errorf("answer lacks %q:\n%s", s, answer)
				}
			}
			for _, s := range tt.absent {
				if strings.Contains(answer, s) {
					t.Errorf("answer has %q:\n%s", s, answer)
				}
			}
			if len(answer) > 8 && len(deltas) < 2 {
				t.Errorf("answer of %d bytes came in %d delta(s)", len(answer), len(deltas))
			}
			if usage.PromptTokens == 0 || usage.CompletionTokens == 0 || usage.TotalTokens != usage.PromptTokens+usage.CompletionTokens {
				t.Errorf("usage %+v", usage)
			}
		})
	}
}

func TestOfflineChatCancellation(t *testing.T) {
	sources := []service.Source{{Index: 1, Content: strings.Repeat("Go is a programming language. ", 20)}}
	req := service.ChatRequest{Messages: []service.ChatMessage{{Role: "user", Content: "What is Go?"}}, Sources: sources}

	t.Run("cancelled by the caller", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		m := chatFor(t, Config{StreamDelay: time.Millisecond})
		n := 0
		_, err := m.Stream(ctx, req, func(service.Delta) error {
			n++
			if n == 3 {
				cancel()
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) || n != 3 {
			t.Fatalf("err = %v after %d deltas, want context.Canceled after 3", err, n)
		}
	})
	t.Run("stopped by onDelta", func(t *testing.T) {
		stop := errors.New("client gone")
		n := 0
		_, err := chatFor(t, Config{}).Stream(context.Background(), req, func(service.Delta) error {
			n++
			return stop
		})
		if !errors.Is(err, stop) || n != 1 {
			t.Fatalf("err = %v after %d deltas, want the onDelta error after 1", err, n)
		}
	})
}

func BenchmarkOfflineEmbed(b *testing.B) {
	e := newOfflineEmbedder(DefaultEmbeddingDim)
	chunk := []string{strings.Repeat("Vitamin D deficiency is associated with a higher risk of fracture in elderly patients. ", 12) +
		strings.Repeat("员工申请年假需要提前三天在系统中提交申请。", 6)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Embed(context.Background(), service.EmbedDocument, chunk); err != nil {
			b.Fatal(err)
		}
	}
}
