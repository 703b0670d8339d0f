package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ragent-go/ragent/internal/testenv"
)

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /metrics is on RAGENT_METRICS_ADDR only, unless RAGENT_METRICS_PUBLIC
// puts it on the API's port too.
func TestMetricsPort(t *testing.T) {
	for _, public := range []bool{false, true} {
		t.Run(fmt.Sprint("public=", public), func(t *testing.T) {
			cfg := testConfig(t)
			cfg.MetricsPublic = public
			in := start(t, cfg)
			in.client(t, "").do("GET", "/healthz", nil)
			status, _ := get(t, in.url+"/metrics")
			if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[public]; status != want {
				t.Fatalf("/metrics on the API port: %d, want %d", status, want)
			}
			status, body := get(t, "http://"+in.app.metricsLn.Addr().String()+"/metrics")
			if status != http.StatusOK || !strings.Contains(body, "ragent_http_requests_total") {
				t.Fatalf("metrics listener: %d %.200s", status, body)
			}
		})
	}
	c, err := loadConfig(envOf())
	if err != nil {
		t.Fatal(err)
	}
	if c.MetricsAddr != "127.0.0.1:9464" || c.MetricsPublic {
		t.Fatalf("defaults: addr %q, public %v", c.MetricsAddr, c.MetricsPublic)
	}
	if c, _ = loadConfig(envOf("RAGENT_METRICS_ADDR", "off")); c.MetricsAddr != "" {
		t.Fatalf("off: %q", c.MetricsAddr)
	}
}

// gathered returns the registry's metric families by name.
func gathered(t *testing.T, in *instance) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := in.app.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// sample sums the values of the family's series that carry every label
// pair given.
func sample(mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	var sum float64
	for _, m := range mfs[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			ok = ok && have[labels[i]] == labels[i+1]
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

// dashboardMetrics returns every metric name the Grafana dashboard queries.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/grafana/ragent.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	name := regexp.MustCompile(`\b(ragent_|ratelimit_|go_|process_)[a-z_]+`)
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				if !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("the dashboard queries only %d metrics: %v", len(out), out)
	}
	return out
}

// After one upload and one chat, every stage's metrics hold what happened,
// and every metric the dashboard queries exists.
func TestMetricsEveryStage(t *testing.T) {
	llm := newFakeLLM(t)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/doc.txt":
			io.WriteString(w, "Printers are on the second floor, next to the kitchen.")
		case "/hook":
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(site.Close)
	cfg := chatConfig(t, llm)
	cfg.FetchAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	in := start(t, cfg)
	admin := in.login(t, "admin", "admin-password")
	c := in.client(t, admin)
	kb := seedKnowledge(t, in, admin)
	if status, _ := c.chatStream(context.Background(), map[string]any{"question": "How do I connect to the VPN?"}, nil); status != http.StatusOK {
		t.Fatalf("chat %d", status)
	}
	// A webhook and a URL import: one request each through the outbound
	// clients.
	if r := c.do("POST", "/api/v1/knowledge-bases/"+kb+"/webhooks", map[string]string{"url": site.URL + "/hook"}); r.Status != http.StatusCreated {
		t.Fatalf("webhook: %d %s", r.Status, r.Body)
	}
	c.waitReady(c.importURL(kb, map[string]string{"url": site.URL + "/doc.txt"}).ID)
	testenv.Eventually(t, 30*time.Second, "a webhook delivery", func() bool {
		return sample(gathered(t, in), "ragent_outbound_requests_total", "client", "webhook", "outcome", "2xx") >= 1
	})

	mfs := gathered(t, in)
	for _, n := range dashboardMetrics(t) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if mfs[n] == nil && mfs[base] == nil {
			t.Errorf("the dashboard queries %s, which the registry does not hold", n)
		}
	}
	checks := []struct {
		name   string
		labels []string
	}{
		{"ragent_mq_published_total", []string{"topic", "ragent-document-ingest", "outcome", "ok"}},
		{"ragent_mq_delivered_total", []string{"topic", "ragent-document-ingest"}},
		{"ragent_ingest_chunks_indexed_total", nil},
		{"ragent_ingest_documents_total", []string{"outcome", "ready"}},
		{"ragent_ingest_stage_seconds", []string{"stage", "parse"}},
		{"ragent_ingest_stage_seconds", []string{"stage", "chunk"}},
		{"ragent_ingest_stage_seconds", []string{"stage", "embed"}},
		{"ragent_ingest_stage_seconds", []string{"stage", "index"}},
		{"ragent_embed_calls_total", []string{"kind", "document", "outcome", "ok"}},
		{"ragent_embed_calls_total", []string{"kind", "query", "outcome", "ok"}},
		{"ragent_embed_texts_total", []string{"kind", "document"}},
		{"ragent_embed_seconds", []string{"kind", "query"}},
		{"ragent_documents", []string{"status", "ready"}},
		{"ragent_llm_calls_total", []string{"outcome", "ok"}},
		{"ragent_outbound_requests_total", []string{"client", "fetch", "outcome", "2xx"}},
		{"ragent_outbound_request_seconds", []string{"client", "fetch"}},
	}
	for _, ch := range checks {
		if v := sample(mfs, ch.name, ch.labels...); v < 1 {
			t.Errorf("%s%v = %v, want ≥ 1", ch.name, ch.labels, v)
		}
	}
	if v := sample(mfs, "ragent_mq_lag", "topic", "ragent-document-ingest"); v != 0 {
		t.Errorf("ragent_mq_lag = %v after the document was ingested, want 0", v)
	}
	if len(mfs["ragent_mq_lag"].GetMetric()) != 1 || len(mfs["ragent_mq_pending"].GetMetric()) != 1 {
		t.Errorf("lag %v, pending %v: want one series each", mfs["ragent_mq_lag"], mfs["ragent_mq_pending"])
	}
}

// otlpReceiver is an OTLP/HTTP trace receiver on the official protobuf
// types: it keeps every span it is sent.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "unexpected "+req.URL.Path+" "+req.Header.Get("Content-Type"), http.StatusBadRequest)
			return
		}
		b, err := io.ReadAll(req.Body)
		var msg coltrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &msg)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// named returns the received spans called name.
func (r *otlpReceiver) named(name string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// child returns the span called name whose parent is parent, or nil.
func (r *otlpReceiver) child(parent *tracepb.Span, name string) *tracepb.Span {
	for _, s := range r.named(name) {
		if bytes.Equal(s.ParentSpanId, parent.SpanId) && bytes.Equal(s.TraceId, parent.TraceId) {
			return s
		}
	}
	return nil
}

// A document's spans continue its upload's trace across the MQ, and a chat
// turn's steps are children of the turn; both reach a real OTLP receiver.
func TestTracesOverOTLP(t *testing.T) {
	recv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.srv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: spans leave quickly
	t.Setenv("OTEL_SERVICE_NAME", "ragent-test")
	llm := newFakeLLM(t)
	reranker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Documents []string }
		json.NewDecoder(r.Body).Decode(&req)
		type result struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
		}
		out := struct {
			Results []result `json:"results"`
		}{}
		for i := range req.Documents {
			out.Results = append(out.Results, result{Index: i, RelevanceScore: 1})
		}
		json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(reranker.Close)
	cfg := chatConfig(t, llm)
	cfg.RerankModel, cfg.RerankBaseURL = "test-rerank", reranker.URL
	c, err := loadConfig(func(k string) string { return os.Getenv(k) })
	if err != nil || !c.Tracing {
		t.Fatalf("OTEL_EXPORTER_OTLP_ENDPOINT set: tracing %v, %v", c.Tracing, err)
	}
	cfg.Tracing = true
	in := start(t, cfg)
	admin := in.login(t, "admin", "admin-password")
	seedKnowledge(t, in, admin)
	cl := in.client(t, admin)
	status, events := cl.chatStream(context.Background(), map[string]any{"question": "How do I connect to the VPN?"}, nil)
	if status != http.StatusOK {
		t.Fatalf("chat %d", status)
	}
	conv := events[0].json(t)["conversationId"]
	if status, _ := cl.chatStream(context.Background(), map[string]any{"question": "And on a phone?", "conversationId": conv}, nil); status != http.StatusOK {
		t.Fatalf("second chat %d", status)
	}

	// The document: upload → (MQ) → document → parse, chunk, embed, index.
	testenv.Eventually(t, 30*time.Second, "the document's spans", func() bool {
		return len(recv.named("ingest.index")) > 0 && len(recv.named("ingest.upload")) > 0
	})
	upload := recv.named("ingest.upload")[0]
	doc := recv.child(upload, "ingest.document")
	if doc == nil {
		t.Fatalf("no ingest.document span under the upload's span")
	}
	for _, stage := range []string{"ingest.parse", "ingest.chunk", "ingest.embed", "ingest.index"} {
		if recv.child(doc, stage) == nil {
			t.Errorf("no %s span under ingest.document", stage)
		}
	}

	// The chat turns: every step a child of its turn, retrieval's steps
	// children of the search.
	testenv.Eventually(t, 30*time.Second, "both chat turns' spans", func() bool {
		return len(recv.named("chat.turn")) == 2 && len(recv.named("chat.answer")) == 2
	})
	var first, second *tracepb.Span
	for _, turn := range recv.named("chat.turn") {
		if recv.child(turn, "chat.rewrite") != nil {
			second = turn
		} else {
			first = turn
		}
	}
	if first == nil || second == nil {
		t.Fatalf("want one turn with a rewrite (the follow-up) and one without")
	}
	if len(first.ParentSpanId) != 0 {
		t.Errorf("chat.turn has a parent")
	}
	for _, step := range []string{"chat.queue_wait", "chat.intent", "retrieve.search", "chat.answer", "chat.title"} {
		if recv.child(first, step) == nil {
			t.Errorf("no %s span under the first chat.turn", step)
		}
	}
	search := recv.child(first, "retrieve.search")
	if search == nil {
		t.FailNow()
	}
	for _, step := range []string{"retrieve.keyword", "retrieve.vector", "retrieve.rerank"} {
		if recv.child(search, step) == nil {
			t.Errorf("no %s span under retrieve.search", step)
		}
	}
	if !hasAttr(search, "ragent.search.mode", "hybrid") {
		t.Errorf("retrieve.search attributes %v", search.Attributes)
	}
}

func hasAttr(s *tracepb.Span, key, value string) bool {
	for _, a := range s.Attributes {
		if a.Key == key && a.Value.GetStringValue() == value {
			return true
		}
	}
	return false
}

// A log line written inside a span carries its trace and span ids.
func TestLogLinesCarryTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(&buf, "info")
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	log.InfoContext(ctx, "inside")
	span.End()
	log.InfoContext(context.Background(), "outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var in, out map[string]any
	json.Unmarshal([]byte(lines[0]), &in)
	json.Unmarshal([]byte(lines[1]), &out)
	sc := span.SpanContext()
	if in["trace_id"] != sc.TraceID().String() || in["span_id"] != sc.SpanID().String() {
		t.Errorf("inside a span: %s", lines[0])
	}
	if _, ok := out["trace_id"]; ok {
		t.Errorf("outside a span: %s", lines[1])
	}
}

// On the OpenSearch backend a document's bulk write is timed, and the
// search-index topic (a deletion goes through it; ingestion writes its
// chunks itself) is counted like the ingest topic.
func TestMetricsOpenSearchBulk(t *testing.T) {
	in, c, kb := ingestEnv(t, openSearchConfig(t, ""))
	d := c.uploadAccepted(kb, "bulk.txt", []byte("Bulk writes carry the chunks of this document to the index."))
	c.waitReady(d.ID)
	if r := c.do("DELETE", "/api/v1/documents/"+d.ID, nil); r.Status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	testenv.Eventually(t, 30*time.Second, "the deletion's search-index message delivered", func() bool {
		return sample(gathered(t, in), "ragent_mq_delivered_total", "topic", "ragent-search-index") >= 1
	})
	mfs := gathered(t, in)
	if v := sample(mfs, "ragent_opensearch_bulk_seconds", "op", "index"); v < 1 {
		t.Errorf("ragent_opensearch_bulk_seconds{op=index} counted %v writes", v)
	}
	if v := sample(mfs, "ragent_opensearch_bulk_errors_total"); v != 0 {
		t.Errorf("ragent_opensearch_bulk_errors_total = %v", v)
	}
	if v := sample(mfs, "ragent_mq_delivered_total", "topic", "ragent-search-index"); v < 1 {
		t.Errorf("search-index deliveries %v", v)
	}
}
