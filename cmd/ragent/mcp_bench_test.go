package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ragent-go/ragent/internal/eval"
)

// BenchmarkMCPOverhead measures what the MCP server adds to the HTTP API,
// alternating the two in one run with one API key: a keyword search's
// latency (POST /api/v1/search against the search tool), and the time to
// first token of a chat (the first message event of POST /api/v1/chat
// against the ask tool's first answer progress notification), on the fake
// LLM. The Go SDK's client keeps one session, as an IDE does.
//
//	go test ./cmd/ragent -run '^$' -bench MCPOverhead -benchtime 200x
func BenchmarkMCPOverhead(b *testing.B) {
	llm := newFakeLLM(b)
	cfg := chatConfig(b, llm)
	cfg.ChatRatePerMinute, cfg.APIKeyRatePerMinute = 0, 0 // measured, not limited
	in := start(b, cfg)
	admin := in.login(b, "admin", "admin-password")
	seedKnowledge(b, in, admin)
	var k apiKeyJSON
	if r := in.client(b, admin).do("POST", "/api/v1/api-keys", map[string]any{"name": "bench", "scopes": []string{"search", "chat"}}); r.Status != http.StatusCreated {
		b.Fatalf("create key: %d %s", r.Status, r.Body)
	} else {
		r.json(b, &k)
	}
	s := mustConnect(b, in, k.Key)
	// first hears the first progress of the ask under way (its token):
	// a late notification of an earlier one must not count.
	first := make(chan struct{}, 1)
	var token atomic.Value
	s.onProgress = func(p *mcpsdk.ProgressNotificationParams) {
		if p.ProgressToken != token.Load() {
			return
		}
		select {
		case first <- struct{}{}:
		default:
		}
	}
	keyClient := in.client(b, k.Key)
	search := map[string]any{"query": "VPN GlobalProtect", "mode": "keyword", "topK": 5}
	const question = "How do I connect to the VPN?"
	isMessage := func(l string) bool { return l == "event: message" }
	ctx := context.Background()
	var searchHTTP, searchMCP, ttftHTTP, ttftMCP []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if r := keyClient.do("POST", "/api/v1/search", search); r.Status != http.StatusOK {
			b.Fatalf("search: %d %s", r.Status, r.Body)
		}
		searchHTTP = append(searchHTTP, time.Since(start))
		start = time.Now()
		if res, err := s.try("search", search, nil); err != nil || res.IsError {
			b.Fatalf("search tool: %v %v", err, res)
		}
		searchMCP = append(searchMCP, time.Since(start))

		d, err := firstEvent(ctx, in.url+"/api/v1/chat", k.Key, map[string]any{"question": question}, isMessage)
		if err != nil {
			b.Fatal(err)
		}
		ttftHTTP = append(ttftHTTP, d)
		done := make(chan error, 1)
		tok := fmt.Sprintf("ask-%d", i)
		token.Store(tok)
		start = time.Now()
		go func() {
			res, err := s.try("ask", map[string]any{"question": question}, tok)
			if err == nil && res.IsError {
				err = &toolErr{resultText(res)}
			}
			done <- err
		}()
		select {
		case <-first:
			ttftMCP = append(ttftMCP, time.Since(start))
		case err := <-done:
			b.Fatalf("ask ended before its first token: %v", err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		token.Store("")
		select { // this answer's later progress
		case <-first:
		default:
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	p50 := func(ds []time.Duration) time.Duration { return eval.Percentile(ds, 0.5) }
	b.ReportMetric(ms(p50(searchHTTP)), "search-http-p50-ms")
	b.ReportMetric(ms(p50(searchMCP)), "search-mcp-p50-ms")
	b.ReportMetric(float64(p50(searchMCP))/float64(p50(searchHTTP)), "search-p50-ratio")
	b.ReportMetric(ms(p50(ttftHTTP)), "ttft-http-p50-ms")
	b.ReportMetric(ms(p50(ttftMCP)), "ttft-mcp-p50-ms")
	b.ReportMetric(ms(p50(ttftMCP)-p50(ttftHTTP)), "ttft-added-p50-ms")
	b.ReportMetric(ms(eval.Percentile(ttftMCP, 0.99)-eval.Percentile(ttftHTTP, 0.99)), "ttft-added-p99-ms")
}

type toolErr struct{ text string }

func (e *toolErr) Error() string { return e.text }
