package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ragent-go/ragent/internal/testenv"
)

// These tests drive the MCP server (/mcp, api/mcp) with the official Go
// SDK's client over the Streamable HTTP transport, against real services;
// mcp_clients_test.go does the same with the Python and TypeScript SDKs.

// mcpFixture is an instance with two knowledge bases: kb, which the keys
// reach, and other (with a document only the admin reads), outside the
// limited keys' list.
type mcpFixture struct {
	in                      *instance
	llm                     *fakeLLM
	admin                   *client
	kb, other               string
	otherDoc, otherChunk    string
	full, noChat, unlimited string // keys: every scope but ingest limited to kb; read+search limited to kb; read+search+chat on everything
}

func newMCPFixture(t *testing.T, tune func(*Config)) *mcpFixture {
	t.Helper()
	f := &mcpFixture{llm: newFakeLLM(t)}
	cfg := chatConfig(t, f.llm)
	if tune != nil {
		tune(&cfg)
	}
	f.in = start(t, cfg)
	f.admin = f.in.adminClient(t)
	f.kb = seedKnowledge(t, f.in, f.admin.token)
	f.other = f.admin.createKB("other-" + t.Name())
	doc := f.admin.uploadAccepted(f.other, "payroll.md", []byte("# Payroll\n\nSalaries are paid on the 25th of each month by bank transfer.\n"))
	f.admin.waitReady(doc.ID)
	f.otherDoc = doc.ID
	hits := f.admin.search(f.other, "salaries", "keyword")
	if len(hits) == 0 {
		t.Fatal("the other knowledge base's document is not searchable")
	}
	f.otherChunk = hits[0].ChunkID
	f.full = createKey(t, f.admin, map[string]any{"name": "mcp", "scopes": []string{"read", "search", "chat"}, "knowledgeBaseIds": []string{f.kb}}).Key
	f.noChat = createKey(t, f.admin, map[string]any{"name": "mcp-nochat", "scopes": []string{"read", "search"}, "knowledgeBaseIds": []string{f.kb}}).Key
	f.unlimited = createKey(t, f.admin, map[string]any{"name": "mcp-all", "scopes": []string{"read", "search", "chat"}}).Key
	return f
}

// bearer adds an API key to every request of the MCP client.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// mcpSession is a connected Go SDK client and the progress it was sent.
type mcpSession struct {
	*mcpsdk.ClientSession
	t        testing.TB
	mu       sync.Mutex
	progress []*mcpsdk.ProgressNotificationParams
	// onProgress, when set, sees each notification as it arrives.
	onProgress func(*mcpsdk.ProgressNotificationParams)
}

func mcpConnect(t testing.TB, in *instance, key string) (*mcpSession, error) {
	t.Helper()
	s := &mcpSession{t: t}
	c := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "ragent-test", Version: "1"}, &mcpsdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcpsdk.ProgressNotificationClientRequest) {
			s.mu.Lock()
			s.progress = append(s.progress, req.Params)
			on := s.onProgress
			s.mu.Unlock()
			if on != nil {
				on(req.Params)
			}
		},
	})
	tr := &mcpsdk.StreamableClientTransport{Endpoint: in.url + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{key: key, next: http.DefaultTransport}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		return nil, err
	}
	s.ClientSession = cs
	t.Cleanup(func() { cs.Close() })
	return s, nil
}

func mustConnect(t testing.TB, in *instance, key string) *mcpSession {
	t.Helper()
	s, err := mcpConnect(t, in, key)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return s
}

// call calls a tool; a protocol error fails the test, a tool error is the
// result's IsError.
func (s *mcpSession) call(name string, args map[string]any, progressToken any) *mcpsdk.CallToolResult {
	s.t.Helper()
	res, err := s.try(name, args, progressToken)
	if err != nil {
		s.t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func (s *mcpSession) try(name string, args map[string]any, progressToken any) (*mcpsdk.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &mcpsdk.CallToolParams{Name: name, Arguments: args}
	if progressToken != nil {
		p.SetProgressToken(progressToken)
	}
	return s.CallTool(ctx, p)
}

// structured decodes a result's structured content into v.
func structured(t testing.TB, res *mcpsdk.CallToolResult, v any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", resultText(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

func resultText(res *mcpsdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// toolRefused checks a tool error with code.
func toolRefused(t testing.TB, res *mcpsdk.CallToolResult, code string) {
	t.Helper()
	if !res.IsError || !strings.HasPrefix(resultText(res), code+":") {
		t.Fatalf("want a %s tool error, got error=%v %q", code, res.IsError, resultText(res))
	}
}

type mcpSearchOut struct {
	Results []struct {
		ChunkID, DocumentID, DocumentName, KnowledgeBaseID, Section, Content, Link string
		Score                                                                      float64
	}
}

type mcpAskOut struct {
	Answer, Status, ConversationID, MessageID string
	Sources                                   []struct {
		Index                                   int
		ChunkID, DocumentID, DocumentName, Link string
		Score                                   float64
	}
}

// TestMCPTools: the five tools, their schemas, and what a key limited to
// one knowledge base reaches through each.
func TestMCPTools(t *testing.T) {
	f := newMCPFixture(t, nil)
	s := mustConnect(t, f.in, f.full)

	tools, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		in, _ := json.Marshal(tl.InputSchema)
		if tl.Description == "" || !strings.Contains(string(in), `"type":"object"`) || tl.OutputSchema == nil {
			t.Errorf("tool %s: description %q, input schema %s, output schema %v", tl.Name, tl.Description, in, tl.OutputSchema)
		}
		if tl.Name == "search" && (!strings.Contains(string(in), `"required":["query"]`) || !strings.Contains(string(in), `"enum":["hybrid","keyword","vector"]`)) {
			t.Errorf("search input schema %s", in)
		}
	}
	slices.Sort(names)
	if want := []string{"ask", "feedback", "get_chunk", "get_document", "list_knowledge_bases", "search"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	var kbs struct {
		KnowledgeBases []struct{ ID, Name, Role string }
	}
	structured(t, s.call("list_knowledge_bases", nil, nil), &kbs)
	if len(kbs.KnowledgeBases) != 1 || kbs.KnowledgeBases[0].ID != f.kb || kbs.KnowledgeBases[0].Role != "viewer" {
		t.Fatalf("knowledge bases %+v, want only %s (viewer: the key has no ingest scope)", kbs, f.kb)
	}

	var found mcpSearchOut
	structured(t, s.call("search", map[string]any{"query": "VPN GlobalProtect", "mode": "keyword", "topK": 3}, nil), &found)
	if len(found.Results) == 0 {
		t.Fatal("no results")
	}
	hit := found.Results[0]
	if hit.DocumentName != "vpn.md" || hit.Section == "" || hit.Score <= 0 || !strings.Contains(hit.Content, "GlobalProtect") ||
		hit.Link != f.in.url+"/api/v1/documents/"+hit.DocumentID || hit.KnowledgeBaseID != f.kb {
		t.Fatalf("hit %+v", hit)
	}
	// The link is the document on the HTTP API, for the same key.
	if r := f.in.client(t, f.full).do("GET", strings.TrimPrefix(hit.Link, f.in.url), nil); r.Status != http.StatusOK {
		t.Fatalf("link %s: %d", hit.Link, r.Status)
	}
	// The same search over HTTP finds the same chunks.
	httpHits := f.in.client(t, f.full).search(f.kb, "VPN GlobalProtect", "keyword")
	if len(httpHits) == 0 || httpHits[0].ChunkID != hit.ChunkID {
		t.Fatalf("HTTP search %+v, MCP %+v", httpHits, hit)
	}

	var chunk struct{ ID, DocumentID, DocumentName, Content, Link string }
	structured(t, s.call("get_chunk", map[string]any{"chunkId": hit.ChunkID}, nil), &chunk)
	if chunk.ID != hit.ChunkID || chunk.DocumentName != "vpn.md" || !strings.Contains(chunk.Content, "GlobalProtect") {
		t.Fatalf("chunk %+v", chunk)
	}
	var doc struct {
		ID, Name, Status string
		ChunkCount       int
		Chunks           []struct{ ID, Content string }
		NextOrdinal      *int
	}
	structured(t, s.call("get_document", map[string]any{"documentId": hit.DocumentID}, nil), &doc)
	if doc.Name != "vpn.md" || doc.Status != "ready" || len(doc.Chunks) != doc.ChunkCount || doc.Chunks[0].ID == "" || doc.NextOrdinal != nil {
		t.Fatalf("document %+v", doc)
	}

	// Outside the key's list: not found on every path, like an id that
	// does not exist.
	toolRefused(t, s.call("search", map[string]any{"query": "salaries", "knowledgeBaseIds": []string{f.other}}, nil), "not_found")
	toolRefused(t, s.call("get_chunk", map[string]any{"chunkId": f.otherChunk}, nil), "not_found")
	toolRefused(t, s.call("get_document", map[string]any{"documentId": f.otherDoc}, nil), "not_found")
	toolRefused(t, s.call("ask", map[string]any{"question": "When are salaries paid?", "knowledgeBaseIds": []string{f.other}}, nil), "not_found")
	toolRefused(t, s.call("get_chunk", map[string]any{"chunkId": "999999999"}, nil), "not_found")
	var all mcpSearchOut
	structured(t, s.call("search", map[string]any{"query": "salaries paid bank transfer", "mode": "keyword"}, nil), &all)
	for _, r := range all.Results {
		if r.KnowledgeBaseID == f.other {
			t.Fatalf("a search of every knowledge base found %+v, outside the key's list", r)
		}
	}
	// A key without the limit reaches the other knowledge base.
	u := mustConnect(t, f.in, f.unlimited)
	structured(t, u.call("get_chunk", map[string]any{"chunkId": f.otherChunk}, nil), &chunk)
	if !strings.Contains(chunk.Content, "Salaries") {
		t.Fatalf("unlimited key's chunk %+v", chunk)
	}

	// Invalid input: the schema and the use case refuse it.
	if res := s.call("search", map[string]any{"query": "vpn", "mode": "fuzzy"}, nil); !res.IsError {
		t.Fatalf("mode fuzzy accepted: %s", resultText(res))
	}
	toolRefused(t, s.call("search", map[string]any{"query": "vpn", "topK": 10000}, nil), "invalid")
	toolRefused(t, s.call("get_document", map[string]any{"documentId": hit.DocumentID, "limit": 101}, nil), "invalid")
	if res := s.call("get_chunk", map[string]any{"chunkId": "abc"}, nil); !res.IsError {
		t.Fatalf("chunk id abc accepted: %s", resultText(res))
	}
}

// TestMCPAsk: ask answers through the chat pipeline with numbered
// citations, streams progress, continues a conversation, and is refused to
// a key without the chat scope.
func TestMCPAsk(t *testing.T) {
	f := newMCPFixture(t, nil)
	s := mustConnect(t, f.in, f.full)

	res := s.call("ask", map[string]any{"question": "How do I connect to the VPN?"}, "ask-1")
	var out mcpAskOut
	structured(t, res, &out)
	if out.Answer != "Hello from the model [1]." || out.Status != "completed" || out.ConversationID == "" || len(out.Sources) == 0 {
		t.Fatalf("answer %+v", out)
	}
	if src := out.Sources[0]; src.Index != 1 || src.DocumentName != "vpn.md" || src.Link != f.in.url+"/api/v1/documents/"+src.DocumentID {
		t.Fatalf("source %+v", src)
	}
	if text := resultText(res); !strings.HasPrefix(text, out.Answer) || !strings.Contains(text, "[1] vpn.md (") {
		t.Fatalf("text %q", text)
	}
	s.mu.Lock()
	var deltas []string
	for i, p := range s.progress {
		if p.ProgressToken != "ask-1" || p.Progress != float64(i+1) {
			t.Errorf("progress %d: %+v", i, p)
		}
		deltas = append(deltas, p.Message)
	}
	s.mu.Unlock()
	if !strings.Contains(strings.Join(deltas, ""), "Hello from the model [1].") {
		t.Fatalf("progress messages %q do not carry the answer", deltas)
	}

	// The turn is the owner's conversation, as any chat.
	r := f.admin.do("GET", "/api/v1/conversations/"+out.ConversationID+"/messages", nil)
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), "Hello from the model") {
		t.Fatalf("conversation: %d %s", r.Status, r.Body)
	}
	var next mcpAskOut
	structured(t, s.call("ask", map[string]any{"question": "And on a phone?", "conversationId": out.ConversationID}, nil), &next)
	if next.ConversationID != out.ConversationID {
		t.Fatalf("follow-up in conversation %s, want %s", next.ConversationID, out.ConversationID)
	}
	// Another user's conversation does not exist for this key.
	toolRefused(t, s.call("ask", map[string]any{"question": "again", "conversationId": "123456789"}, nil), "not_found")
	toolRefused(t, s.call("ask", map[string]any{"question": "   "}, nil), "invalid")

	n := mustConnect(t, f.in, f.noChat)
	res = n.call("ask", map[string]any{"question": "How do I connect to the VPN?"}, nil)
	toolRefused(t, res, "forbidden")
	if !strings.Contains(resultText(res), "chat scope") {
		t.Fatalf("refusal %q does not name the chat scope", resultText(res))
	}
	// The same key searches: its scopes, as over HTTP.
	var found mcpSearchOut
	structured(t, n.call("search", map[string]any{"query": "VPN"}, nil), &found)
	if len(found.Results) == 0 {
		t.Fatal("search with the no-chat key found nothing")
	}
	readOnly := createKey(t, f.admin, map[string]any{"name": "read-only", "scopes": []string{"read"}}).Key
	ro := mustConnect(t, f.in, readOnly)
	toolRefused(t, ro.call("search", map[string]any{"query": "VPN"}, nil), "forbidden")
	structured(t, ro.call("get_document", map[string]any{"documentId": found.Results[0].DocumentID}, nil), &struct{}{})
}

// TestMCPAskQueue: an ask waits in the fair queue like any chat, and its
// progress tells its place; a stop from the HTTP API ends it.
func TestMCPAskQueue(t *testing.T) {
	f := newMCPFixture(t, func(c *Config) { c.ChatMaxConcurrent, c.ChatMaxWait = 1, time.Minute })
	const hold = "holds the slot #gate"
	var wg sync.WaitGroup
	wg.Go(func() { f.in.client(t, f.full).chatStream(context.Background(), map[string]any{"question": hold}, nil) })
	if q := f.llm.nextStart(t); q != hold {
		t.Fatalf("started %q", q)
	}
	s := mustConnect(t, f.in, f.full)
	queued := make(chan string, 16)
	s.mu.Lock()
	s.onProgress = func(p *mcpsdk.ProgressNotificationParams) {
		select {
		case queued <- p.Message:
		default:
		}
	}
	s.mu.Unlock()
	done := make(chan *mcpsdk.CallToolResult, 1)
	go func() {
		res, _ := s.try("ask", map[string]any{"question": "How do I connect to the VPN?"}, 7)
		done <- res
	}()
	select {
	case m := <-queued:
		if m != "waiting for the model: place 1 of 1 in the queue" {
			t.Fatalf("first progress %q", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no queue progress")
	}
	f.llm.open(hold)
	wg.Wait()
	var out mcpAskOut
	select {
	case res := <-done:
		structured(t, res, &out)
	case <-time.After(30 * time.Second):
		t.Fatal("no answer after the slot freed")
	}
	if out.Status != "completed" {
		t.Fatalf("answer %+v", out)
	}
}

// TestMCPAuthentication: no key, a session token, a bad key and a revoked
// key are refused; a session id is bound to the key that opened it.
func TestMCPAuthentication(t *testing.T) {
	f := newMCPFixture(t, nil)
	for name, key := range map[string]string{"none": "", "session token": f.admin.token, "unknown key": "rk_0123456789abcdef"} {
		t.Run(name, func(t *testing.T) {
			if _, err := mcpConnect(t, f.in, key); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
				t.Fatalf("connect: %v, want 401", err)
			}
			req, _ := http.NewRequest("POST", f.in.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			if r := roundTrip(t, req); r.Status != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") == "" {
				t.Fatalf("status %d, WWW-Authenticate %q", r.Status, r.Header.Get("WWW-Authenticate"))
			}
		})
	}

	s := mustConnect(t, f.in, f.full)
	// Another key cannot use this session's id.
	req, _ := http.NewRequest("POST", f.in.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+f.noChat)
	req.Header.Set("Mcp-Session-Id", s.ID())
	req.Header.Set("Mcp-Protocol-Version", s.InitializeResult().ProtocolVersion)
	if r := roundTrip(t, req); r.Status != http.StatusForbidden {
		t.Fatalf("another key on the session: %d, want 403", r.Status)
	}

	// Revoking the key stops the session at its next request.
	var keys struct{ Items []apiKeyJSON }
	f.admin.do("GET", "/api/v1/api-keys", nil).json(t, &keys)
	for _, k := range keys.Items {
		if k.Name == "mcp" {
			if r := f.admin.do("DELETE", "/api/v1/api-keys/"+k.ID, nil); r.Status != http.StatusNoContent {
				t.Fatalf("revoke: %d %s", r.Status, r.Body)
			}
		}
	}
	if _, err := s.try("list_knowledge_bases", nil, nil); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("call with a revoked key: %v", err)
	}
}

// TestMCPSessionBounds: a key past its sessions closes its oldest, the
// instance past its own refuses new ones, and an idle session ends.
func TestMCPSessionBounds(t *testing.T) {
	f := newMCPFixture(t, func(c *Config) {
		c.MCPMaxSessions, c.MCPMaxSessionsPerKey, c.MCPSessionIdle = 3, 2, 2*time.Second
	})
	first := mustConnect(t, f.in, f.full)
	second := mustConnect(t, f.in, f.full)
	third := mustConnect(t, f.in, f.full) // closes first
	if _, err := first.try("list_knowledge_bases", nil, nil); err == nil {
		t.Fatal("the key's oldest session still answers after it opened a third")
	}
	for _, s := range []*mcpSession{second, third} {
		s.call("list_knowledge_bases", nil, nil)
	}
	mustConnect(t, f.in, f.unlimited) // the instance's third session
	_, err := mcpConnect(t, f.in, f.noChat)
	if err == nil || !strings.Contains(err.Error(), "Service Unavailable") {
		t.Fatalf("a fourth session on the instance: %v, want 503", err)
	}

	// Idle sessions end: the calls below keep second alive while third and
	// the unlimited key's, unused (a call would renew them), time out and
	// leave room for a new session.
	testenv.Eventually(t, 30*time.Second, "room for a new session", func() bool {
		second.call("list_knowledge_bases", nil, nil)
		_, err := mcpConnect(t, f.in, f.noChat)
		return err == nil
	})
	second.call("list_knowledge_bases", nil, nil)
	if _, err := third.try("list_knowledge_bases", nil, nil); err == nil {
		t.Fatal("the idle session still answers")
	}
}

// TestMCPShutdown: shutting down ends a running ask and does not wait for
// the clients' open streams (the SDK detaches a call from its request).
func TestMCPShutdown(t *testing.T) {
	f := newMCPFixture(t, nil)
	s := mustConnect(t, f.in, f.full)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.try("ask", map[string]any{"question": "held until shutdown #gate"}, nil)
	}()
	if q := f.llm.nextStart(t); q != "held until shutdown #gate" {
		t.Fatalf("started %q", q)
	}
	stopped := make(chan struct{})
	go func() { f.in.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("shutdown waits for the MCP session")
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the ask did not end at shutdown")
	}
	if at, ok := f.llm.abandonedAt("held until shutdown #gate"); !ok || at.IsZero() {
		t.Fatal("the model call was not given up at shutdown")
	}
}
