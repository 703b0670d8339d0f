package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	Name string
	ID   string
	Data string
}

func (e sseEvent) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(e.Data), &m); err != nil {
		t.Fatalf("event %s data %q: %v", e.Name, e.Data, err)
	}
	return m
}

// chatStream posts a question and calls onEvent for each event until the
// stream ends or onEvent returns false (then the client disconnects).
func (c *client) chatStream(ctx context.Context, body map[string]any, onEvent func(sseEvent) bool) (status int, events []sseEvent) {
	c.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", c.base+"/api/v1/chat", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Errorf("chat: %v", err)
		return 0, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Name != "" {
				events = append(events, cur)
				if onEvent != nil && !onEvent(cur) {
					return resp.StatusCode, events
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			cur.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
		}
	}
	return resp.StatusCode, events
}

// collapse folds runs of one event (message message → message) for
// sequence checks.
func collapse(events []sseEvent) string {
	var out []string
	for _, e := range events {
		if len(out) > 0 && out[len(out)-1] == e.Name {
			continue
		}
		out = append(out, e.Name)
	}
	return strings.Join(out, " ")
}
