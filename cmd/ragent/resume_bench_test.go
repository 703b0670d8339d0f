package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func isEventLine(l string) bool { return strings.HasPrefix(l, "event: ") }

// BenchmarkChatResume measures how soon a resumed stream's first replayed
// event arrives: a task answered on instance A is resumed on instance B with
// Last-Event-ID: 5. The baseline, alternated with it in the same run, is
// POST /chat's first event (meta) on B.
//
//	go test ./cmd/ragent -run '^$' -bench ChatResume -benchtime 200x
func BenchmarkChatResume(b *testing.B) {
	llm := newFakeLLM(b)
	cfg := chatConfig(b, llm)
	a, bb := start(b, cfg), start(b, cfg)
	token := a.login(b, "admin", "admin-password")
	onA := a.client(b, token)
	_, events := onA.chatStream(context.Background(), map[string]any{"question": "resume bench #medium"}, nil)
	if len(events) < 10 {
		b.Fatalf("answer %v", events)
	}
	taskID := events[0].json(b)["taskId"].(string)
	var resumed, posted []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("GET", bb.url+"/api/v1/chat/tasks/"+taskID+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Last-Event-ID", "5")
		d, err := timeToLine(req, isEventLine)
		if err != nil {
			b.Fatal(err)
		}
		resumed = append(resumed, d)

		req, _ = http.NewRequest("POST", bb.url+"/api/v1/chat", strings.NewReader(`{"question":"baseline"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if d, err = timeToLine(req, isEventLine); err != nil {
			b.Fatal(err)
		}
		posted = append(posted, d)
	}
	b.StopTimer()
	reportPercentiles(b, "ms", []int{50, 95}, map[string][]time.Duration{"resume": resumed, "post-meta": posted}, "", "")
}

// BenchmarkChatDetachedMemory compares what n running answers cost the
// process attached (their clients reading) and detached (their clients
// gone, the answers running on): heap in use after a GC and goroutines,
// per task, over the idle process. The answers wait at the fake model's
// gate, so all n are alive at the moment of measuring. The attached figure
// includes the test's own client side of each connection (same process).
//
//	go test ./cmd/ragent -run '^$' -bench ChatDetachedMemory -benchtime 1x
func BenchmarkChatDetachedMemory(b *testing.B) {
	const n = 50
	llm := newFakeLLM(b)
	cfg := chatConfig(b, llm)
	cfg.ChatMaxConcurrent, cfg.ChatMaxRunningPerUser, cfg.ChatMaxQueuedPerUser = n, n, n
	in := start(b, cfg)
	c := in.adminClient(b)

	measure := func() (heap uint64, goroutines int) {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc, runtime.NumGoroutine()
	}
	round := func(name string, detach bool) {
		heap0, g0 := measure()
		var wg sync.WaitGroup
		questions := make([]string, n)
		for i := range n {
			questions[i] = fmt.Sprintf("%s %d #gate", name, i)
			metaSeen := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", c.base+"/api/v1/chat",
				strings.NewReader(fmt.Sprintf(`{"question":%q}`, questions[i])))
			req.Header.Set("Authorization", "Bearer "+c.token)
			req.Header.Set("Content-Type", "application/json")
			wg.Go(func() {
				defer cancel()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					close(metaSeen)
					return
				}
				defer resp.Body.Close()
				// A lean client: a small buffer, reading to the sources event.
				r := bufio.NewReaderSize(resp.Body, 512)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if line == "event: sources\n" {
						close(metaSeen)
						break
					}
				}
				if !detach {
					_, _ = io.Copy(io.Discard, r)
				}
			})
			<-metaSeen
		}
		for range n {
			select {
			case <-llm.started:
			case <-time.After(30 * time.Second):
				b.Fatal("the answers did not reach the model")
			}
		}
		if detach {
			// Every client is gone; the answers wait at the gate, detached.
			wg.Wait()
		}
		heap1, g1 := measure()
		b.ReportMetric(float64(int64(heap1)-int64(heap0))/n, name+"-heap-B/task")
		b.ReportMetric(float64(g1-g0)/n, name+"-goroutines/task")
		for _, q := range questions {
			llm.open(q)
		}
		if !detach {
			wg.Wait()
		}
		waitPermitsFree(b, c)
	}
	for i := 0; i < b.N; i++ {
		round("attached", false)
		round("detached", true)
	}
}

// waitPermitsFree waits until no chat permit is in use.
func waitPermitsFree(b *testing.B, c *client) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var st struct{ PermitsInUse int }
		c.do("GET", "/api/v1/admin/limiter", nil).json(b, &st)
		if st.PermitsInUse == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatal("permits still in use after 30 s")
}
