package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// oaiChunk is a chat.completion or chat.completion.chunk as clients read it.
type oaiChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message *oaiMsg `json:"message"`
		Delta   *oaiMsg `json:"delta"`
		Finish  *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Error *oaiErr `json:"error"`
	// Comment is set instead of the rest for an SSE comment line.
	Comment string `json:"-"`
}

type oaiMsg struct {
	Role      string `json:"role"`
	Content   *string
	Reasoning string `json:"reasoning_content"`
	Sources   []struct {
		Index        int     `json:"index"`
		DocumentID   string  `json:"document_id"`
		DocumentName string  `json:"document_name"`
		ChunkID      string  `json:"chunk_id"`
		Score        float64 `json:"score"`
		Excerpt      string  `json:"excerpt"`
	} `json:"sources"`
}

type oaiErr struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    string  `json:"code"`
	Param   *string `json:"param"`
}

// oaiError decodes an OpenAI-shaped error body, failing on any other shape.
func oaiError(t testing.TB, r response) oaiErr {
	t.Helper()
	var e struct {
		Error *struct {
			Message *string `json:"message"`
			Type    *string `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	r.json(t, &e)
	if e.Error == nil || e.Error.Message == nil || e.Error.Type == nil || e.Error.Code == nil {
		t.Fatalf("not an OpenAI error body: %d %s", r.Status, r.Body)
	}
	return oaiErr{Message: *e.Error.Message, Type: *e.Error.Type, Code: *e.Error.Code}
}

// oaiStream is a parsed /v1/chat/completions stream.
type oaiStream struct {
	Status   int
	Header   http.Header
	Body     []byte // the body of a non-200 answer
	Comments []string
	Chunks   []oaiChunk
	Done     bool // data: [DONE] arrived
}

// completions posts a request and, for a stream, reads its events until the
// end or until onChunk returns false (then the client disconnects); comment
// lines reach onChunk as chunks with only Comment set.
func (c *client) completions(ctx context.Context, body any, onChunk func(oaiChunk) bool, headers ...string) oaiStream {
	c.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", c.base+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	c.authorize(req, headers)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			c.t.Errorf("completions: %v", err)
		}
		return oaiStream{}
	}
	defer resp.Body.Close()
	out := oaiStream{Status: resp.StatusCode, Header: resp.Header}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		out.Body = buf.Bytes()
		return out
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ": "):
			out.Comments = append(out.Comments, strings.TrimPrefix(line, ": "))
			if onChunk != nil && !onChunk(oaiChunk{Comment: strings.TrimPrefix(line, ": ")}) {
				return out
			}
		case line == "data: [DONE]":
			out.Done = true
		case strings.HasPrefix(line, "data: "):
			var ch oaiChunk
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ch); err != nil {
				c.t.Errorf("chunk %q: %v", line, err)
				return out
			}
			out.Chunks = append(out.Chunks, ch)
			if onChunk != nil && !onChunk(ch) {
				return out
			}
		case line == "":
		default:
			c.t.Errorf("unexpected line in an OpenAI stream: %q", line)
		}
	}
	return out
}

// text joins a stream's content deltas.
func (s oaiStream) text() string {
	var b strings.Builder
	for _, ch := range s.Chunks {
		for _, c := range ch.Choices {
			if c.Delta != nil && c.Delta.Content != nil {
				b.WriteString(*c.Delta.Content)
			}
		}
	}
	return b.String()
}

// chatKey creates an API key of c's user with the chat scope.
func chatKey(t *testing.T, c *client, name string) string {
	t.Helper()
	return createKey(t, c, map[string]any{"name": name, "scopes": []string{"chat"}}).Key
}

func userMsg(q string) []map[string]any { return []map[string]any{{"role": "user", "content": q}} }

// TestOpenAIChatCompletions drives both models, stream and non-stream,
// through an API key: content with [n] citations, the sources extension,
// usage, the stored conversation and its continuation, and the client's
// history reaching the model.
func TestOpenAIChatCompletions(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	admin := in.adminClient(t)
	kb := seedKnowledge(t, in, admin.token)
	var kbJSON struct{ Name string }
	admin.do("GET", "/api/v1/knowledge-bases/"+kb, nil).json(t, &kbJSON)
	key := in.client(t, chatKey(t, admin, "bot"))

	// The models: ragent and one per readable knowledge base.
	var models struct {
		Object string
		Data   []struct {
			ID, Object, OwnedBy string
			KnowledgeBaseID     string `json:"knowledge_base_id"`
		}
	}
	r := key.do("GET", "/v1/models", nil)
	r.json(t, &models)
	if r.Status != http.StatusOK || models.Object != "list" || len(models.Data) != 2 || models.Data[0].ID != "ragent" ||
		models.Data[1].ID != "ragent/"+kbJSON.Name || models.Data[1].KnowledgeBaseID != kb || models.Data[1].Object != "model" {
		t.Fatalf("models: %d %s", r.Status, r.Body)
	}

	for _, model := range []string{"ragent", "ragent/" + kbJSON.Name, "ragent/" + kb} {
		t.Run("non-stream "+model, func(t *testing.T) {
			key := key.forTest(t)
			r := key.do("POST", "/v1/chat/completions", map[string]any{
				"model": model, "messages": userMsg("How do I connect to the VPN?"),
				"temperature": 0.2, "max_tokens": 100, "user": "someone", // accepted; max_tokens caps the answer
			})
			var res oaiChunk
			r.json(t, &res)
			if r.Status != http.StatusOK || res.Object != "chat.completion" || res.Model != model || !strings.HasPrefix(res.ID, "chatcmpl-") || len(res.Choices) != 1 {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			m := res.Choices[0].Message
			if m == nil || m.Role != "assistant" || m.Content == nil || *m.Content != "Hello from the model [1]." || *res.Choices[0].Finish != "stop" {
				t.Fatalf("message %s", r.Body)
			}
			if len(m.Sources) == 0 || m.Sources[0].DocumentName != "vpn.md" || m.Sources[0].Index != 1 || m.Sources[0].Excerpt == "" || m.Sources[0].DocumentID == "" {
				t.Fatalf("sources %s", r.Body)
			}
			if res.Usage == nil || res.Usage.TotalTokens == 0 || res.Usage.TotalTokens != res.Usage.PromptTokens+res.Usage.CompletionTokens {
				t.Fatalf("usage %s", r.Body)
			}
			// Stored like /api/v1/chat: the key's owner sees the turn.
			conv := r.Header.Get("X-Ragent-Conversation")
			msgs := conversationMessages(t, admin.forTest(t), conv)
			if len(msgs) != 2 || msgs[0].Content != "How do I connect to the VPN?" || msgs[1].Content != "Hello from the model [1]." || msgs[1].Status != "completed" {
				t.Fatalf("stored %+v", msgs)
			}
			if r.Header.Get("X-Ragent-Task") == "" || res.ID != "chatcmpl-"+msgs[1].ID {
				t.Fatalf("task header %q, id %q, stored answer %s", r.Header.Get("X-Ragent-Task"), res.ID, msgs[1].ID)
			}
		})
	}

	t.Run("stream", func(t *testing.T) {
		for _, includeUsage := range []bool{true, false} {
			body := map[string]any{"model": "ragent/" + kbJSON.Name, "messages": userMsg("How do I connect to the VPN?"), "stream": true}
			if includeUsage {
				body["stream_options"] = map[string]any{"include_usage": true}
			}
			s := key.forTest(t).completions(context.Background(), body, nil)
			if s.Status != http.StatusOK || !s.Done || s.text() != "Hello from the model [1]." {
				t.Fatalf("stream: %d done=%v text %q body %s", s.Status, s.Done, s.text(), s.Body)
			}
			first := s.Chunks[0]
			if first.Object != "chat.completion.chunk" || first.Choices[0].Delta.Role != "assistant" {
				t.Fatalf("first chunk %+v", first)
			}
			n := len(s.Chunks)
			final := s.Chunks[n-1]
			if includeUsage {
				if len(final.Choices) != 0 || final.Usage == nil || final.Usage.TotalTokens == 0 {
					t.Fatalf("usage chunk %+v", final)
				}
				final = s.Chunks[n-2]
			}
			if final.Choices[0].Finish == nil || *final.Choices[0].Finish != "stop" || len(final.Choices[0].Delta.Sources) == 0 ||
				final.Choices[0].Delta.Sources[0].DocumentName != "vpn.md" {
				t.Fatalf("final chunk %+v", final)
			}
			for _, ch := range s.Chunks {
				if ch.ID != first.ID || (ch.Usage != nil && len(ch.Choices) != 0) {
					t.Fatalf("chunk %+v (first id %s)", ch, first.ID)
				}
				if !includeUsage && ch.Usage != nil {
					t.Fatalf("usage without include_usage: %+v", ch)
				}
			}
		}
	})

	t.Run("conversation continued", func(t *testing.T) {
		key := key.forTest(t)
		r := key.do("POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": userMsg("first question about the VPN")})
		conv := r.Header.Get("X-Ragent-Conversation")
		s := key.completions(context.Background(), map[string]any{
			"model": "ragent", "stream": true, "messages": userMsg("and the follow-up zq7"),
		}, nil, "X-Ragent-Conversation", conv)
		if s.Status != http.StatusOK || s.Header.Get("X-Ragent-Conversation") != conv {
			t.Fatalf("continue: %d %s %v", s.Status, s.Body, s.Header)
		}
		if msgs := conversationMessages(t, admin.forTest(t), conv); len(msgs) != 4 || msgs[2].Content != "and the follow-up zq7" {
			t.Fatalf("stored %+v", msgs)
		}
		// The stored history reached the rewrite.
		if req, ok := llm.request("and the follow-up zq7"); !ok || !strings.Contains(req.Messages[len(req.Messages)-1].Content, "first question about the VPN") {
			t.Fatalf("the rewrite did not see the stored history: %+v", req)
		}
	})

	t.Run("client history and instructions", func(t *testing.T) {
		r := key.forTest(t).do("POST", "/v1/chat/completions", map[string]any{"model": "ragent/" + kbJSON.Name, "messages": []map[string]any{
			{"role": "system", "content": "Answer like a pirate k4x."},
			{"role": "user", "content": [](map[string]string){{"type": "text", "text": "earlier question h9w"}}},
			{"role": "assistant", "content": "earlier answer"},
			{"role": "user", "content": "so how do I connect?"},
		}})
		if r.Status != http.StatusOK {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		req, ok := llm.request("Answer like a pirate k4x.")
		if !ok {
			t.Fatal("the client's instructions did not reach the model")
		}
		var roles []string
		for _, m := range req.Messages {
			roles = append(roles, m.Role)
		}
		if strings.Join(roles, " ") != "system user assistant user" || req.Messages[1].Content != "earlier question h9w" || req.Messages[2].Content != "earlier answer" {
			t.Fatalf("answer prompt %+v", req.Messages)
		}
		// The client's history is not stored: only this turn.
		if msgs := conversationMessages(t, admin.forTest(t), r.Header.Get("X-Ragent-Conversation")); len(msgs) != 2 {
			t.Fatalf("stored %+v", msgs)
		}
	})

	t.Run("unknown models", func(t *testing.T) {
		for _, model := range []string{"gpt-4o", "ragent/no-such-kb", "ragent/1", ""} {
			r := key.forTest(t).do("POST", "/v1/chat/completions", map[string]any{"model": model, "messages": userMsg("hi")})
			e := oaiError(t, r)
			switch {
			case model == "" && (r.Status != http.StatusBadRequest || e.Type != "invalid_request_error"):
				t.Errorf("no model: %d %s", r.Status, r.Body)
			case model != "" && (r.Status != http.StatusNotFound || e.Code != "model_not_found" || e.Type != "invalid_request_error"):
				t.Errorf("%s: %d %s", model, r.Status, r.Body)
			}
		}
	})
}

// TestOpenAIModelsFollowAccess: a user lists and asks only the knowledge
// bases they may read; a key limited to one lists only that one.
func TestOpenAIModelsFollowAccess(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	admin := in.adminClient(t)
	in.createUser(t, admin.token, "bob", "bob-password", "user")
	bob := in.client(t, in.login(t, "bob", "bob-password"))
	private := admin.createKB("secret-kb")
	open := admin.createKB("open-kb")
	admin.makeInternal(open)
	ids := func(c *client) string {
		var m struct{ Data []struct{ ID string } }
		c.do("GET", "/v1/models", nil).json(t, &m)
		var out []string
		for _, d := range m.Data {
			out = append(out, d.ID)
		}
		return strings.Join(out, ",")
	}
	if got := ids(bob); got != "ragent,ragent/open-kb" {
		t.Fatalf("bob's models %q", got)
	}
	if got := ids(admin); got != "ragent,ragent/secret-kb,ragent/open-kb" {
		t.Fatalf("admin's models %q", got)
	}
	for _, model := range []string{"ragent/secret-kb", "ragent/" + private} {
		r := bob.do("POST", "/v1/chat/completions", map[string]any{"model": model, "messages": userMsg("hi")})
		if e := oaiError(t, r); r.Status != http.StatusNotFound || e.Code != "model_not_found" {
			t.Fatalf("bob asks %s: %d %s", model, r.Status, r.Body)
		}
	}
	limited := in.client(t, createKey(t, admin, map[string]any{"name": "one", "scopes": []string{"chat"}, "knowledgeBaseIds": []string{open}}).Key)
	if got := ids(limited); got != "ragent,ragent/open-kb" {
		t.Fatalf("limited key's models %q", got)
	}
}

// waitQueued waits until n requests wait in the chat queue (the admin's
// limiter page).
func waitQueued(t *testing.T, admin *client, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var lim struct{ QueueLength int }
		if r := admin.do("GET", "/api/v1/admin/limiter", nil); r.Status == http.StatusOK {
			r.json(t, &lim)
		}
		if lim.QueueLength == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want %d", lim.QueueLength, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOpenAIErrorsAndValidation: every refusal on /v1 is OpenAI-shaped with
// the right status, and bad, oversized and hostile bodies are refused
// before anything runs.
func TestOpenAIErrorsAndValidation(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	admin := in.adminClient(t)
	key := in.client(t, chatKey(t, admin, "bot"))
	searchOnly := in.client(t, createKey(t, admin, map[string]any{"name": "search", "scopes": []string{"search"}}).Key)
	in.createUser(t, admin.token, "bob", "bob-password", "user")
	bob := in.client(t, in.login(t, "bob", "bob-password"))
	adminConv := admin.do("POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": userMsg("admin's own")}).Header.Get("X-Ragent-Conversation")
	before := llm.streams.Load()

	ok := map[string]any{"model": "ragent", "messages": userMsg("hi")}
	with := func(k string, v any) map[string]any {
		m := map[string]any{"model": "ragent", "messages": userMsg("hi")}
		m[k] = v
		return m
	}
	tests := []struct {
		name    string
		c       *client
		method  string
		path    string
		body    any
		headers []string
		status  int
		typ     string
		code    string
	}{
		{"no credentials", in.client(t, ""), "POST", "/v1/chat/completions", ok, nil, 401, "authentication_error", "unauthenticated"},
		{"bad key", in.client(t, "rk_nope"), "GET", "/v1/models", nil, nil, 401, "authentication_error", "unauthenticated"},
		{"key without chat scope", searchOnly, "POST", "/v1/chat/completions", ok, nil, 403, "permission_error", "forbidden"},
		{"models without chat scope", searchOnly, "GET", "/v1/models", nil, nil, 403, "permission_error", "forbidden"},
		{"unknown route", key, "POST", "/v1/embeddings", ok, nil, 404, "invalid_request_error", "not_found"},
		{"wrong method", key, "GET", "/v1/chat/completions", nil, nil, 405, "invalid_request_error", "method_not_allowed"},
		{"malformed JSON", key, "POST", "/v1/chat/completions", `{"model":`, nil, 400, "invalid_request_error", "malformed_json"},
		{"trailing data", key, "POST", "/v1/chat/completions", `{"model":"ragent","messages":[]} {}`, nil, 400, "invalid_request_error", "malformed_json"},
		{"not JSON", key, "POST", "/v1/chat/completions", ok, []string{"Content-Type", "text/plain"}, 415, "invalid_request_error", "unsupported_type"},
		{"oversized", key, "POST", "/v1/chat/completions", `{"model":"ragent","messages":[{"role":"user","content":"` + strings.Repeat("a", 1<<20) + `"}]}`, nil, 413, "invalid_request_error", "too_large"},
		{"no messages", key, "POST", "/v1/chat/completions", with("messages", []any{}), nil, 400, "invalid_request_error", "invalid"},
		{"last message not the user's", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}}), nil, 400, "invalid_request_error", "invalid"},
		{"empty question", key, "POST", "/v1/chat/completions", with("messages", userMsg("   ")), nil, 400, "invalid_request_error", "invalid"},
		{"question too long", key, "POST", "/v1/chat/completions", with("messages", userMsg(strings.Repeat("长", 4001))), nil, 400, "invalid_request_error", "invalid"},
		{"history message too long", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "assistant", "content": strings.Repeat("a", 16001)}, {"role": "user", "content": "q"}}), nil, 400, "invalid_request_error", "invalid"},
		{"NUL in the question", key, "POST", "/v1/chat/completions", with("messages", userMsg("a\u0000b")), nil, 400, "invalid_request_error", "invalid"},
		{"NUL in a text part", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "user", "content": []map[string]string{{"type": "text", "text": "\u0000"}}}}), nil, 400, "invalid_request_error", "invalid"},
		{"image part", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "user", "content": []map[string]any{{"type": "image_url", "image_url": map[string]string{"url": "http://x/y.png"}}}}}), nil, 400, "invalid_request_error", "invalid"},
		{"content not text", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "user", "content": 42}}), nil, 400, "invalid_request_error", "invalid"},
		{"tool message", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "tool", "content": "x"}, {"role": "user", "content": "q"}}), nil, 400, "invalid_request_error", "invalid"},
		{"tools", key, "POST", "/v1/chat/completions", with("tools", []map[string]any{{"type": "function", "function": map[string]any{"name": "f"}}}), nil, 400, "invalid_request_error", "invalid"},
		{"n=2", key, "POST", "/v1/chat/completions", with("n", 2), nil, 400, "invalid_request_error", "invalid"},
		{"json response format", key, "POST", "/v1/chat/completions", with("response_format", map[string]string{"type": "json_object"}), nil, 400, "invalid_request_error", "invalid"},
		{"bad conversation header", key, "POST", "/v1/chat/completions", ok, []string{"X-Ragent-Conversation", "x'; drop"}, 400, "invalid_request_error", "invalid"},
		{"someone else's conversation", bob, "POST", "/v1/chat/completions", ok, []string{"X-Ragent-Conversation", adminConv}, 404, "invalid_request_error", "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.c.forTest(t).do(tt.method, tt.path, tt.body, tt.headers...)
			e := oaiError(t, r)
			if r.Status != tt.status || e.Type != tt.typ || e.Code != tt.code || e.Message == "" {
				t.Fatalf("%d %s, want %d %s %s", r.Status, r.Body, tt.status, tt.typ, tt.code)
			}
			if r.Header.Get("X-Ragent-Conversation") != "" {
				t.Fatalf("an error names a conversation: %v", r.Header)
			}
		})
	}
	if n := llm.streams.Load(); n != before {
		t.Fatalf("refused requests reached the model (%d answers)", n-before)
	}
	// The rest of the API keeps its own error shape.
	if r := key.do("GET", "/api/v1/no-such", nil); !strings.Contains(string(r.Body), `"code":"not_found"`) || strings.Contains(string(r.Body), `"type"`) {
		t.Fatalf("/api/v1 error: %s", r.Body)
	}

	// A browser session is a session: cookie writes need the page's origin.
	token := admin.token
	browser := cookieClient{t: t, base: in.url, cookie: token}
	body := []byte(`{"model":"ragent","messages":[{"role":"user","content":"from a page"}]}`)
	r := browser.do("POST", "/v1/chat/completions", "application/json", body, "Origin", "http://evil.example")
	if e := oaiError(t, r); r.Status != http.StatusForbidden || e.Code != "csrf" {
		t.Fatalf("cross-origin cookie write: %d %s", r.Status, r.Body)
	}
	if r := browser.do("POST", "/v1/chat/completions", "text/plain", body, "Origin", in.url); r.Status != http.StatusForbidden {
		t.Fatalf("text/plain cookie write: %d %s", r.Status, r.Body)
	}
	if r := browser.do("POST", "/v1/chat/completions", "application/json", body, "Origin", in.url); r.Status != http.StatusOK {
		t.Fatalf("same-origin cookie write: %d %s", r.Status, r.Body)
	}
	if r := browser.do("GET", "/v1/models", "", nil); r.Status != http.StatusOK {
		t.Fatalf("models with the cookie: %d %s", r.Status, r.Body)
	}
}

// TestOpenAIQueue: with one slot and one waiting request per user, a
// request that must wait gets its stream started at once and keep-alive
// comments (no queue chunks), then its answer; one refused by a full share
// gets 429 with Retry-After before anything streams, stream or not; the
// chat rate's 429 carries its own Retry-After.
func TestOpenAIQueue(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatMaxConcurrent, cfg.ChatMaxQueuedPerUser, cfg.ChatMaxWait = 1, 1, 60*time.Second
	cfg.SSEKeepAlive = 100 * time.Millisecond
	in := start(t, cfg)
	admin := in.adminClient(t)
	key := in.client(t, chatKey(t, admin, "bot"))

	var wg sync.WaitGroup
	var holder, waiter oaiStream
	const holdQ = "hold the slot #gate"
	wg.Go(func() {
		holder = key.completions(context.Background(), map[string]any{"model": "ragent", "stream": true, "messages": userMsg(holdQ)}, nil)
	})
	if q := llm.nextStart(t); q != holdQ {
		t.Fatalf("started %q", q)
	}
	keptAlive := make(chan struct{})
	var once sync.Once
	wg.Go(func() {
		waiter = key.completions(context.Background(), map[string]any{"model": "ragent", "stream": true, "messages": userMsg("waits its turn #gate")}, func(ch oaiChunk) bool {
			if ch.Comment == "keep-alive" {
				once.Do(func() { close(keptAlive) })
			}
			return true
		})
	})
	// Once the second request waits, the user's share of the queue is full.
	waitQueued(t, admin, 1)

	// The user's share is full: a third request is refused before any
	// stream, with Retry-After, stream or not.
	for _, stream := range []bool{true, false} {
		s := key.completions(context.Background(), map[string]any{"model": "ragent", "stream": stream, "messages": userMsg("one too many")}, nil)
		e := oaiError(t, response{Status: s.Status, Body: s.Body})
		if s.Status != http.StatusTooManyRequests || e.Type != "rate_limit_error" || e.Code != "busy" || s.Header.Get("Retry-After") == "" || s.Header.Get("X-Ragent-Conversation") != "" {
			t.Fatalf("stream=%v: %d %v %s", stream, s.Status, s.Header, s.Body)
		}
		// The queue's estimate, not a fixed second: the waiter ahead leaves
		// the queue (served or refused) within its 60 s wait.
		if secs, err := strconv.Atoi(s.Header.Get("Retry-After")); err != nil || secs < 10 || secs > 60 {
			t.Fatalf("stream=%v: Retry-After %q, want the waiter's remaining wait (10..60 s)", stream, s.Header.Get("Retry-After"))
		}
	}

	// The waiter's stream stays alive while it waits.
	select {
	case <-keptAlive:
	case <-time.After(30 * time.Second):
		t.Fatal("no keep-alive comment while waiting")
	}
	llm.open(holdQ)
	if q := llm.nextStart(t); q != "waits its turn #gate" {
		t.Fatalf("started %q", q)
	}
	llm.open("waits its turn #gate")
	wg.Wait()
	if holder.text() != "Hello from the model [1]." || !holder.Done {
		t.Fatalf("holder %+v", holder)
	}
	if waiter.text() != "Hello from the model [1]." || !waiter.Done {
		t.Fatalf("waiter %+v", waiter)
	}
	var waiting, kept int
	for _, c := range waiter.Comments {
		switch c {
		case "waiting for a model slot":
			waiting++
		case "keep-alive":
			kept++
		}
	}
	if waiting == 0 || kept == 0 {
		t.Fatalf("waiter's comments %q: want the queue's and keep-alives", waiter.Comments)
	}
	for _, ch := range waiter.Chunks {
		if ch.Error != nil {
			t.Fatalf("waiter got an error chunk %+v", ch.Error)
		}
	}
}

// TestOpenAIChatRate: over RAGENT_CHAT_RATE_PER_MINUTE a completion gets
// 429 with the rate's Retry-After, before anything is written.
func TestOpenAIChatRate(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatRatePerMinute = 1
	in := start(t, cfg)
	admin := in.adminClient(t)
	key := in.client(t, chatKey(t, admin, "bot"))
	if r := key.do("POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": userMsg("first")}); r.Status != http.StatusOK {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	n := conversationCount(t, admin)
	s := key.completions(context.Background(), map[string]any{"model": "ragent", "stream": true, "messages": userMsg("second")}, nil)
	e := oaiError(t, response{Status: s.Status, Body: s.Body})
	if s.Status != http.StatusTooManyRequests || e.Type != "rate_limit_error" || s.Header.Get("Retry-After") == "" || s.Header.Get("Retry-After") == "0" {
		t.Fatalf("over the rate: %d %v %s", s.Status, s.Header, s.Body)
	}
	if got := conversationCount(t, admin); got != n {
		t.Fatalf("a refused turn wrote a conversation: %d, was %d", got, n)
	}
}

// TestOpenAIDisconnectCancelsUpstream: a client that goes away, streaming
// or waiting for a whole completion, aborts the model's request (the fake
// model sees its request context cancelled) and the turn is saved
// cancelled.
func TestOpenAIDisconnectCancelsUpstream(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	admin := in.adminClient(t)
	key := in.client(t, chatKey(t, admin, "bot"))

	waitAbandoned := func(t *testing.T, q string, since time.Time) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if at, ok := llm.abandonedAt(q); ok {
				if at.Before(since) {
					t.Fatalf("abandoned before the client left")
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the model's request for %q was not cancelled after the client left", q)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	t.Run("stream", func(t *testing.T) {
		const q = "long streamed answer #slow"
		ctx, cancel := context.WithCancel(context.Background())
		var left time.Time
		var conv string
		s := key.forTest(t).completions(ctx, map[string]any{"model": "ragent", "stream": true, "messages": userMsg(q)}, func(ch oaiChunk) bool {
			if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != nil && *ch.Choices[0].Delta.Content != "" {
				left = time.Now()
				cancel()
				return false
			}
			return true
		})
		conv = s.Header.Get("X-Ragent-Conversation")
		waitAbandoned(t, q, left)
		waitMessageStatus(t, admin, conv, "cancelled")
	})

	t.Run("non-stream", func(t *testing.T) {
		const q = "whole answer held #gate"
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			key.forTest(t).completions(ctx, map[string]any{"model": "ragent", "messages": userMsg(q)}, nil)
		}()
		if got := llm.nextStart(t); got != q {
			t.Fatalf("started %q", got)
		}
		left := time.Now()
		cancel()
		<-done
		waitAbandoned(t, q, left)
	})
}

// TestOpenAIFailuresInStream: once a stream has started, a refusal after
// waiting in the queue and a model failure arrive as OpenAI's in-stream
// error followed by [DONE]; a non-stream request gets them as HTTP errors.
func TestOpenAIFailuresInStream(t *testing.T) {
	llm, in, admin := oneSlotChat(t)
	key := in.client(t, chatKey(t, admin, "bot"))

	streamError := func(t *testing.T, s oaiStream) *oaiErr {
		t.Helper()
		if s.Status != http.StatusOK || !s.Done || len(s.Chunks) == 0 {
			t.Fatalf("stream: %d done=%v %s", s.Status, s.Done, s.Body)
		}
		return s.Chunks[len(s.Chunks)-1].Error
	}

	t.Run("model fails", func(t *testing.T) {
		s := key.forTest(t).completions(context.Background(), map[string]any{"model": "ragent", "stream": true, "messages": userMsg("broken #500")}, nil)
		if e := streamError(t, s); e == nil || e.Code != "llm_unavailable" || e.Type != "server_error" {
			t.Fatalf("last chunk %+v", s.Chunks[len(s.Chunks)-1])
		}
		r := key.forTest(t).do("POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": userMsg("broken again #500")})
		if e := oaiError(t, r); r.Status != http.StatusServiceUnavailable || e.Code != "llm_unavailable" {
			t.Fatalf("non-stream: %d %s", r.Status, r.Body)
		}
	})

	t.Run("refused after waiting", func(t *testing.T) {
		const holdQ = "holds the only slot #gate"
		done := make(chan struct{})
		go func() {
			defer close(done)
			key.forTest(t).completions(context.Background(), map[string]any{"model": "ragent", "messages": userMsg(holdQ)}, nil)
		}()
		if q := llm.nextStart(t); q != holdQ {
			t.Fatalf("started %q", q)
		}
		s := key.forTest(t).completions(context.Background(), map[string]any{"model": "ragent", "stream": true, "messages": userMsg("waits too long")}, nil)
		if e := streamError(t, s); e == nil || e.Code != "busy" || e.Type != "rate_limit_error" {
			t.Fatalf("chunks %+v comments %q", s.Chunks, s.Comments)
		}
		r := key.forTest(t).do("POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": userMsg("waits too long, whole")})
		if e := oaiError(t, r); r.Status != http.StatusTooManyRequests || e.Code != "busy" || r.Header.Get("Retry-After") == "" {
			t.Fatalf("non-stream: %d %v %s", r.Status, r.Header, r.Body)
		}
		llm.open(holdQ)
		<-done
	})
}

// TestOpenAIStopByTask: the X-Ragent-Task header's task can be stopped with
// /api/v1/chat/tasks/{taskId}/stop; the stream then ends as a (short)
// answer with finish_reason stop and [DONE], and the turn is saved
// cancelled.
func TestOpenAIStopByTask(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	admin := in.adminClient(t)
	key := in.client(t, chatKey(t, admin, "bot"))

	b, _ := json.Marshal(map[string]any{"model": "ragent", "stream": true, "messages": userMsg("stop me #slow")})
	req, _ := http.NewRequest("POST", in.url+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	task, conv := resp.Header.Get("X-Ragent-Task"), resp.Header.Get("X-Ragent-Conversation")
	sc := bufio.NewScanner(resp.Body)
	var text, finish string
	stopped, done := false, false
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "data: ")
		if line == "[DONE]" {
			done = true
			break
		}
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var ch oaiChunk
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatal(err)
		}
		if ch.Error != nil {
			t.Fatalf("error chunk %+v", ch.Error)
		}
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				text += *c.Delta.Content
			}
			if c.Finish != nil {
				finish = *c.Finish
			}
		}
		if text != "" && !stopped {
			stopped = true
			if r := key.do("POST", "/api/v1/chat/tasks/"+task+"/stop", nil); r.Status != http.StatusOK {
				t.Fatalf("stop: %d %s", r.Status, r.Body)
			}
		}
	}
	if !done || finish != "stop" || !strings.HasPrefix(text, "part0") || strings.Contains(text, "part39") {
		t.Fatalf("done=%v finish %q text %q", done, finish, text)
	}
	waitMessageStatus(t, admin, conv, "cancelled")
}
