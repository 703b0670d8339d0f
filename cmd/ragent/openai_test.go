package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
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
				"temperature": 0.2, "max_tokens": 100, "user": "someone", // accepted, ignored
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
