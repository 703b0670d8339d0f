// Command fakellm is the model of the compose `scale` profile's smoke test
// (TestComposeScale): a small OpenAI-compatible chat completions server
// that streams canned answers and counts the calls it has open at once, so
// the test can prove that RAGENT_CHAT_MAX_CONCURRENT holds across three
// ragent instances. It runs in its own container (Dockerfile, target
// fakellm); the test reads its counters with `fakellm get /stats` through
// `docker compose exec`, since only the load balancer publishes a port.
//
//	fakellm serve          listen on :8000 (FAKELLM_ADDR)
//	fakellm get PATH       GET http://127.0.0.1:8000PATH and print the answer
//	fakellm post PATH      the same with POST
//
// Endpoints: POST /v1/chat/completions (streamed or not), GET /health,
// GET /stats ({"open","max","calls","abandoned"}), POST /reset (max back
// to the calls open now). A call's behaviour is chosen by a marker in its
// last user message: "#slow" streams a piece every 100 ms for ten minutes
// (a chat to stop, or to hold a permit with); anything else gets a short
// answer citing [1], a piece every FAKELLM_DELAY (default 200ms). Requests
// for JSON (intent scoring) get {"scores":[]}.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

func main() {
	addr := env("FAKELLM_ADDR", ":8000")
	if len(os.Args) > 1 && (os.Args[1] == "get" || os.Args[1] == "post") {
		if len(os.Args) != 3 {
			log.Fatalf("usage: fakellm %s PATH", os.Args[1])
		}
		os.Exit(client(strings.ToUpper(os.Args[1]), "http://127.0.0.1"+addr[strings.LastIndex(addr, ":"):]+os.Args[2]))
	}
	if len(os.Args) > 1 && os.Args[1] != "serve" {
		log.Fatal("usage: fakellm serve | get PATH | post PATH")
	}
	delay, err := time.ParseDuration(env("FAKELLM_DELAY", "200ms"))
	if err != nil {
		log.Fatalf("FAKELLM_DELAY: %v", err)
	}
	m := &model{delay: delay}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", m.complete)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /stats", m.stats)
	mux.HandleFunc("POST /reset", m.reset)
	log.Printf("fakellm: listening on %s", addr)
	log.Fatal(http.ListenAndServe(addr, mux))
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// client does one request and prints the body; the exit code is 0 for a
// 2xx answer.
func client(method, url string) int {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		log.Print(err)
		return 1
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		log.Print(err)
		return 1
	}
	defer resp.Body.Close()
	io.Copy(os.Stdout, resp.Body)
	if resp.StatusCode/100 != 2 {
		return 1
	}
	return 0
}

// model holds the counters: calls open right now, the most open at once
// since the last reset, every call, and the calls whose client went away
// before the answer was complete.
type model struct {
	delay time.Duration

	mu                     sync.Mutex
	open, max              int
	calls, abandonedStream int
}

type stats struct {
	Open      int `json:"open"`
	Max       int `json:"max"`
	Calls     int `json:"calls"`
	Abandoned int `json:"abandoned"`
}

func (m *model) snapshot() stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return stats{Open: m.open, Max: m.max, Calls: m.calls, Abandoned: m.abandonedStream}
}

func (m *model) stats(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(m.snapshot())
}

func (m *model) reset(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.max = m.open
	m.mu.Unlock()
	m.stats(w, r)
}

// begin counts a call as open; the returned function, called once, ends it.
func (m *model) begin() func() {
	m.mu.Lock()
	m.open++
	m.calls++
	m.max = max(m.max, m.open)
	m.mu.Unlock()
	return sync.OnceFunc(func() {
		m.mu.Lock()
		m.open--
		m.mu.Unlock()
	})
}

type request struct {
	Stream         bool `json:"stream"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

func (m *model) complete(w http.ResponseWriter, r *http.Request) {
	end := m.begin()
	defer end()
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	question := ""
	for _, msg := range req.Messages {
		if msg.Role == "user" {
			question = msg.Content
		}
	}
	pieces, delay := []string{"The", " fake", " model", " answers", " [1]."}, m.delay
	switch {
	case req.ResponseFormat != nil && req.ResponseFormat.Type == "json_object":
		pieces = []string{`{"scores":[]}`}
	case strings.Contains(question, "#slow"):
		pieces, delay = make([]string, 6000), 100*time.Millisecond
		for i := range pieces {
			pieces[i] = fmt.Sprintf("part%d ", i)
		}
	}
	if !req.Stream {
		if !wait(r, delay) {
			m.abandoned()
			return
		}
		end()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": "fake", "object": "chat.completion",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]string{"role": "assistant", "content": strings.Join(pieces, "")}}},
			"usage": map[string]int{"prompt_tokens": 10, "completion_tokens": len(pieces), "total_tokens": 10 + len(pieces)},
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	for _, p := range pieces {
		if !wait(r, delay) {
			m.abandoned()
			return
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", chunk(map[string]string{"content": p}, "")); err != nil {
			m.abandoned()
			return
		}
		flusher.Flush()
	}
	// The call is over for the caller with its last piece: it may start
	// its next one before this handler returns.
	end()
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", chunk(map[string]string{}, "stop"))
	flusher.Flush()
}

func (m *model) abandoned() {
	m.mu.Lock()
	m.abandonedStream++
	m.mu.Unlock()
}

// wait reports false when the caller went away first.
func wait(r *http.Request, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-r.Context().Done():
		return false
	}
}

func chunk(delta map[string]string, finish string) []byte {
	choice := map[string]any{"index": 0, "delta": delta}
	if finish != "" {
		choice["finish_reason"] = finish
	}
	b, _ := json.Marshal(map[string]any{"id": "fake", "object": "chat.completion.chunk", "choices": []any{choice}})
	return b
}
