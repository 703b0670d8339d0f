package composetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// chatLease is RAGENT_CHAT_LEASE of the ragent-scale replicas: how long a
// permit of a killed instance may stay taken (scripts/compose.sh sets it).
const chatLease = 30 * time.Second

// TestComposeScale checks the scale profile (COMPOSE_PROFILES=scale,fakellm;
// scripts/compose.sh smoke starts it with RAGENT_CHAT_MAX_CONCURRENT=2 and
// the fake model), only through the load balancer's published port and
// `docker compose`: three replicas answer in turn; a chat started on one
// is stopped by a request that lands on another; 12 chats at once never put
// more than two calls upstream; killing a replica mid-load loses no document
// and keeps its permits for one lease at most; killing the Redis primary is
// survived once Sentinel has promoted the replica.
func TestComposeScale(t *testing.T) {
	base := os.Getenv("RAGENT_COMPOSE_URL")
	if base == "" || !scaleProfile() {
		t.Skip("RAGENT_COMPOSE_URL is not set or the scale profile is not up (COMPOSE_PROFILES=scale scripts/compose.sh smoke runs this test)")
	}
	s := &stack{t: t, base: strings.TrimRight(base, "/")}
	s.allHealthy()
	if n := len(s.health()["ragent-scale"]); n != 3 {
		t.Fatalf("%d ragent-scale replicas, want 3", n)
	}
	token := s.login(s.adminPassword("ragent-scale"))
	// Each stage builds on the last one's state: the first to fail ends the test.
	failed := false
	stage := func(name string, f func(t *testing.T, s *stack)) {
		if !failed {
			failed = !t.Run(name, func(t *testing.T) { f(t, &stack{t: t, base: s.base}) })
		}
	}

	stage("round robin", func(t *testing.T, s *stack) {
		seen := map[string]int{}
		for range 6 {
			r := s.do("GET", "/api/v1/me", token, nil)
			if r.status != http.StatusOK {
				t.Fatalf("GET /api/v1/me: %d %s", r.status, r.body)
			}
			seen[r.upstream]++
		}
		if len(seen) != 3 {
			t.Fatalf("six requests reached %v, want three replicas twice each", seen)
		}
	})

	stage("stop on another instance", func(t *testing.T, s *stack) {
		before := s.fakeStats()
		var taskID string
		var stop reply
		c := s.chat(context.Background(), token, "a long story #slow", func(_ *chatResult, e event) bool {
			switch e.name {
			case "meta":
				var m struct{ TaskID string }
				json.Unmarshal([]byte(e.data), &m)
				taskID = m.TaskID
			case "message":
				if stop.status == 0 {
					stop = s.do("POST", "/api/v1/chat/tasks/"+taskID+"/stop", token, nil)
				}
			}
			return true
		})
		if c.err != nil {
			t.Fatalf("chat: %v (events %q)", c.err, c.sequence())
		}
		if stop.status != http.StatusOK {
			t.Fatalf("stop: %d %s", stop.status, stop.body)
		}
		if stop.upstream == c.upstream {
			t.Fatalf("the chat and its stop both reached %s: the load balancer did not spread them", c.upstream)
		}
		if got := c.sequence(); got != "meta sources message cancel finish done" && got != "meta message cancel finish done" {
			t.Fatalf("chat on %s stopped on %s: stream %q, want … cancel finish done", c.upstream, stop.upstream, got)
		}
		testenv.Eventually(t, time.Minute, "the model's call abandoned", func() bool {
			return s.fakeStats().Abandoned > before.Abandoned
		})
		t.Logf("chat on %s, stopped on %s", c.upstream, stop.upstream)
	})

	stage("12 chats, 2 calls upstream", func(t *testing.T, s *stack) {
		s.fake("post", "/reset")
		const chats = 12
		results := make([]chatResult, chats)
		var wg sync.WaitGroup
		for i := range chats {
			wg.Go(func() {
				results[i] = s.chat(context.Background(), token, fmt.Sprintf("question %02d", i), nil)
			})
		}
		wg.Wait()
		replicas := map[string]bool{}
		for i, r := range results {
			if r.err != nil || !strings.HasSuffix(r.sequence(), "message finish done") {
				t.Errorf("chat %d on %s: %v, stream %q", i, r.upstream, r.err, r.sequence())
			}
			replicas[r.upstream] = true
		}
		st := s.fakeStats()
		if st.Max != 2 {
			t.Fatalf("the model saw at most %d calls at once, want 2 (RAGENT_CHAT_MAX_CONCURRENT=2 and 12 chats waiting)", st.Max)
		}
		if len(replicas) != 3 {
			t.Fatalf("the chats reached %v, want all three replicas", replicas)
		}
	})

	stage("a replica killed mid-load", func(t *testing.T, s *stack) {
		var kb struct{ ID string }
		s.decode(s.mustRequest("POST", "/api/v1/knowledge-bases", token, map[string]any{"name": "scale " + testenv.RandomSuffix()}, http.StatusCreated), &kb)
		var docs []string
		for i := range 6 {
			docs = append(docs, s.upload(token, kb.ID, fmt.Sprintf("doc-%d.md", i),
				fmt.Appendf(nil, "# Document %d\n\nThe code word of document %d is zebra%d.\n", i, i, i)))
		}
		// Two chats hold both permits, on two replicas (round robin).
		a, b := s.holdPermit(token, "hold a #slow"), s.holdPermit(token, "hold b #slow")
		if a.upstream == b.upstream {
			t.Fatalf("both chats on %s", a.upstream)
		}
		victim := s.containerAt(a.addr)
		killed := time.Now()
		s.docker("kill", victim)
		t.Logf("killed %s (%s) holding a permit, documents in flight", victim, a.upstream)
		if err := a.wait(); err == nil {
			t.Errorf("the chat on the killed replica ended cleanly: %q", a.result.sequence())
		}
		if r := s.do("POST", "/api/v1/chat/tasks/"+b.taskID+"/stop", token, nil); r.status != http.StatusOK {
			t.Fatalf("stop %s: %d %s", b.taskID, r.status, r.body)
		}
		b.wait()

		// b's permit is free at once; a's when its lease runs out.
		c, d := s.holdPermit(token, "hold c #slow"), s.holdPermit(token, "hold d #slow")
		admitted := time.Since(killed)
		t.Logf("two chats held both permits again %v after the kill (lease %v)", admitted.Round(time.Second), chatLease)
		if admitted > chatLease+30*time.Second {
			t.Errorf("the killed replica's permit came back after %v, more than one lease (%v)", admitted, chatLease)
		}
		if st := s.fakeStats(); st.Open != 2 {
			t.Errorf("the model has %d calls open, want the two chats'", st.Open)
		}
		for _, h := range []*heldChat{c, d} {
			if r := s.do("POST", "/api/v1/chat/tasks/"+h.taskID+"/stop", token, nil); r.status != http.StatusOK {
				t.Errorf("stop %s: %d %s", h.taskID, r.status, r.body)
			}
			h.wait()
		}

		for _, id := range docs {
			s.waitReady(token, id)
		}
		s.searchFinds(token, kb.ID, "zebra3", "doc-3.md", "after a replica was killed")
	})

	stage("the Redis primary killed", func(t *testing.T, s *stack) {
		old := s.redisPrimary()
		killed := time.Now()
		s.compose("kill", "redis")
		testenv.Eventually(t, 2*time.Minute, "Sentinel promotes the replica", func() bool { return s.redisPrimary() != old })
		promoted := time.Since(killed)
		testenv.Eventually(t, 3*time.Minute, "a chat answered after the failover", func() bool {
			r := s.chat(context.Background(), token, "after the failover", nil)
			return r.err == nil && strings.HasSuffix(r.sequence(), "message finish done")
		})
		t.Logf("primary %s killed; %s promoted after %v; chats answered again after %v",
			old, s.redisPrimary(), promoted.Round(time.Second), time.Since(killed).Round(time.Second))
		s.login(s.adminPassword("ragent-scale"))
	})
}

// reply is an answer through the load balancer, with the replica that gave
// it (X-Ragent-Upstream) and that replica's address.
type reply struct {
	status         int
	body           []byte
	upstream, addr string
}

func (s *stack) do(method, path, token string, body any) reply {
	s.t.Helper()
	var rd *bytes.Reader
	if body == nil {
		rd = bytes.NewReader(nil)
	} else {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return reply{status: resp.StatusCode, body: out.Bytes(),
		upstream: resp.Header.Get("X-Ragent-Upstream"), addr: resp.Header.Get("X-Ragent-Upstream-Addr")}
}

type event struct{ name, data string }

type chatResult struct {
	upstream, addr string
	events         []event
	err            error
}

// sequence is the stream's event names, repeats collapsed.
func (r chatResult) sequence() string {
	var names []string
	for _, e := range r.events {
		if len(names) == 0 || names[len(names)-1] != e.name {
			names = append(names, e.name)
		}
	}
	return strings.Join(names, " ")
}

// chat asks a question in a new conversation and reads the stream as it
// arrives, calling on (when not nil) with each event and the result so far
// (its upstream and addr are set from the first event on). It never fails the
// test (it runs in goroutines): a refused chat or a broken stream is err.
func (s *stack) chat(ctx context.Context, token, question string, on func(*chatResult, event) bool) chatResult {
	b, _ := json.Marshal(map[string]any{"question": question})
	req, err := http.NewRequestWithContext(ctx, "POST", s.base+"/api/v1/chat", bytes.NewReader(b))
	if err != nil {
		return chatResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return chatResult{err: err}
	}
	defer resp.Body.Close()
	r := chatResult{upstream: resp.Header.Get("X-Ragent-Upstream"), addr: resp.Header.Get("X-Ragent-Upstream-Addr")}
	if resp.StatusCode != http.StatusOK {
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		r.err = fmt.Errorf("status %d: %s", resp.StatusCode, body.String())
		return r
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var cur event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				cur.data += "\n"
			}
			cur.data += strings.TrimPrefix(line, "data: ")
		case line == "" && cur.name != "":
			r.events = append(r.events, cur)
			if on != nil && !on(&r, cur) {
				return r
			}
			if cur.name == "done" {
				return r
			}
			cur = event{}
		}
	}
	r.err = sc.Err()
	if r.err == nil {
		r.err = errors.New("the stream ended without done")
	}
	return r
}

// heldChat is a #slow chat that holds a permit: its answer streams until
// it is stopped or its replica dies.
type heldChat struct {
	taskID, upstream, addr string
	result                 chatResult
	done                   chan struct{}
}

func (h *heldChat) wait() error {
	<-h.done
	return h.result.err
}

// holdPermit starts a #slow chat and returns once its answer streams (the
// chat holds a permit then); it may wait for one in the queue first.
func (s *stack) holdPermit(token, question string) *heldChat {
	s.t.Helper()
	h := &heldChat{done: make(chan struct{})}
	streaming := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(h.done)
		defer once.Do(func() { close(streaming) })
		h.result = s.chat(context.Background(), token, question, func(r *chatResult, e event) bool {
			switch e.name {
			case "meta":
				var m struct{ TaskID string }
				json.Unmarshal([]byte(e.data), &m)
				h.taskID = m.TaskID
			case "message":
				once.Do(func() {
					h.upstream, h.addr = r.upstream, r.addr
					close(streaming)
				})
			}
			return true
		})
	}()
	select {
	case <-streaming:
	case <-time.After(3 * time.Minute):
		s.t.Fatalf("%q: no answer within 3 minutes", question)
	}
	select {
	case <-h.done:
		s.t.Fatalf("%q ended before it held a permit: %v, %q", question, h.result.err, h.result.sequence())
	default:
	}
	return h
}

// containerAt names the ragent-scale container at addr (X-Ragent-Upstream-Addr).
func (s *stack) containerAt(addr string) string {
	s.t.Helper()
	for _, c := range s.containers() {
		if c.Service != "ragent-scale" {
			continue
		}
		ips := strings.Fields(s.docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", c.Name))
		for _, ip := range ips {
			if ip == addr {
				return c.Name
			}
		}
	}
	s.t.Fatalf("no ragent-scale container has the address %q", addr)
	return ""
}

func (s *stack) docker(args ...string) string {
	s.t.Helper()
	var out bytes.Buffer
	cmd := exec.Command("docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		s.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return strings.TrimSpace(out.String())
}

type fakeStats struct{ Open, Max, Calls, Abandoned int }

// fake asks the fake model container (`fakellm get|post PATH`).
func (s *stack) fake(method, path string) string {
	s.t.Helper()
	return s.compose("exec", "-T", "fakellm", "/fakellm", method, path)
}

func (s *stack) fakeStats() fakeStats {
	s.t.Helper()
	var st fakeStats
	s.decode([]byte(s.fake("get", "/stats")), &st)
	return st
}

// redisPrimary is the primary's address as the first Sentinel that
// answers knows it.
func (s *stack) redisPrimary() string {
	s.t.Helper()
	for _, sentinel := range []string{"sentinel-1", "sentinel-2", "sentinel-3"} {
		out, err := s.tryCompose("exec", "-T", sentinel, "redis-cli", "-p", "26379", "sentinel", "get-master-addr-by-name", "ragent")
		if err == nil {
			if f := strings.Fields(out); len(f) == 2 {
				return f[0]
			}
		}
	}
	s.t.Fatal("no Sentinel names the primary")
	return ""
}
