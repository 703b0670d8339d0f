package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/eval"
	"github.com/ragent-go/ragent/internal/testenv"
)

// firstEvent posts body as JSON to url (with the bearer token, if any) and
// returns the time until the first line of the answer that match accepts.
func firstEvent(ctx context.Context, url, token string, body any, match func(line string) bool) (time.Duration, error) {
	var auth []string
	if token != "" {
		auth = []string{"Authorization", "Bearer " + token}
	}
	return timeToLine(jsonRequest(ctx, url, body, auth...), match)
}

// timeToLine sends req and returns the time until the first line of the
// answer that match accepts, draining the rest, so both sides finish the
// request.
func timeToLine(req *http.Request, match func(line string) bool) (time.Duration, error) {
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if match(sc.Text()) {
			d := time.Since(start)
			for sc.Scan() {
			}
			return d, nil
		}
	}
	return 0, fmt.Errorf("stream ended without the line awaited (status %d)", resp.StatusCode)
}

// reportPercentiles reports the percentiles ps (50, 99) of each named
// series, in unit (ms or us), and, unless base is "", what other adds over
// base at each of them (added-p50-ms).
func reportPercentiles(b *testing.B, unit string, ps []int, series map[string][]time.Duration, base, other string) {
	div := map[string]float64{"ms": 1e6, "us": 1e3}[unit]
	at := func(ds []time.Duration, p int) time.Duration { return eval.Percentile(ds, float64(p)/100) }
	for _, p := range ps {
		suffix := fmt.Sprintf("-p%d-%s", p, unit)
		for name, ds := range series {
			b.ReportMetric(float64(at(ds, p))/div, name+suffix)
		}
		if base != "" {
			b.ReportMetric(float64(at(series[other], p)-at(series[base], p))/div, "added"+suffix)
		}
	}
}

// alternate times base and then other once per iteration, b.N times, so
// both see the same machine, and reports their p50 and p99 in unit and
// what other adds over base at each.
func alternate(b *testing.B, unit, baseName string, base func() (time.Duration, error), otherName string, other func() (time.Duration, error)) {
	b.Helper()
	var bases, others []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := base()
		if err != nil {
			b.Fatal(err)
		}
		bases = append(bases, d)
		d, err = other()
		if err != nil {
			b.Fatal(err)
		}
		others = append(others, d)
	}
	b.StopTimer()
	reportPercentiles(b, unit, []int{50, 99}, map[string][]time.Duration{baseName: bases, otherName: others}, baseName, otherName)
}

// BenchmarkChatTTFT measures the time to first token through ragent (offline
// retrieval over a small knowledge base, no rewrite or intent LLM calls)
// against the same fake LLM called directly, alternating the two in one run.
//
//	go test ./cmd/ragent -run '^$' -bench ChatTTFT -benchtime 200x
func BenchmarkChatTTFT(b *testing.B) {
	llm := newFakeLLM(b)
	cfg := chatConfig(b, llm)
	in := start(b, cfg)
	admin := in.login(b, "admin", "admin-password")
	seedKnowledge(b, in, admin)
	direct := map[string]any{"model": "test-model", "stream": true,
		"messages": []map[string]string{{"role": "user", "content": "How do I connect to the VPN?"}}}
	isData := func(l string) bool { return strings.HasPrefix(l, "data: {") }
	isMessage := func(l string) bool { return l == "event: message" }
	ctx := context.Background()
	alternate(b, "ms",
		"direct", func() (time.Duration, error) {
			return firstEvent(ctx, llm.URL()+"/chat/completions", "", direct, isData)
		},
		"ragent", func() (time.Duration, error) {
			return firstEvent(ctx, in.url+"/api/v1/chat", admin, map[string]any{"question": "How do I connect to the VPN?"}, isMessage)
		})
}

// BenchmarkQueuedStreams holds 1,000 SSE streams waiting in the fair queue
// of one `ragent serve` process (a child process, so the client's memory is
// not counted) and reports the server's memory per waiting stream and its
// CPU use while they wait.
//
// The streams come from 100 users, 10 each, as 1,000 waiting people would:
// one account opening 1,000 chats within a minute is refused by the session
// rate (RAGENT_SESSION_RATE_PER_MINUTE, 600 by default: 429 "too many
// requests from this account"), rightly. The per-user queue cap is raised
// from its default of 3 to 10 (334 users at 3 would cost 668 bcrypt hashes
// to create and sign in). Each half opens 5 streams per user, so the second
// half's figure is what a stream costs, not a user's first place in the
// queue.
//
//	go test ./cmd/ragent -run '^$' -bench QueuedStreams -benchtime 1x
func BenchmarkQueuedStreams(b *testing.B) {
	const streams, users = 1000, 100
	llm := newFakeLLM(b)
	cfg := chatConfig(b, llm)
	bin := filepath.Join(b.TempDir(), "ragent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	port, pprofPort := strconv.Itoa(testenv.FreePort(b)), strconv.Itoa(testenv.FreePort(b))
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(),
		"RAGENT_HTTP_ADDR=127.0.0.1:"+port,
		"RAGENT_DATABASE_URL="+cfg.DatabaseURL, "RAGENT_REDIS_URL="+cfg.RedisURL, "RAGENT_REDIS_PREFIX="+cfg.RedisPrefix,
		"RAGENT_ADMIN_PASSWORD=admin-password", "RAGENT_DEMO=false", "RAGENT_LOG_LEVEL=error",
		"RAGENT_LLM_PROVIDER=openai", "RAGENT_LLM_BASE_URL="+llm.URL(), "RAGENT_LLM_CHAT_MODEL=m",
		"RAGENT_CHAT_MAX_CONCURRENT=1", "RAGENT_CHAT_MAX_WAIT=120s", "RAGENT_CHAT_MAX_QUEUE=5000",
		"RAGENT_CHAT_MAX_QUEUED_PER_USER="+strconv.Itoa(streams/users), "RAGENT_CHAT_RATE_PER_MINUTE=0", "RAGENT_PPROF_ADDR=127.0.0.1:"+pprofPort,
		"RAGENT_METRICS_ADDR=off", "RAGENT_METRICS_PUBLIC=true") // goMetrics reads the API port
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	in := &instance{url: "http://127.0.0.1:" + port}
	waitHTTP(b, in.url+"/readyz")
	admin := in.login(b, "admin", "admin-password")
	tokens := make([]string, users)
	for u := range tokens {
		name := fmt.Sprintf("waiter-%03d", u)
		in.createUser(b, admin, name, "waiter-password", "user")
		tokens[u] = in.login(b, name, "waiter-password")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One answer holds the only slot until the end (#gate: the fake model
	// holds it until opened, which nothing does), so nobody's place moves
	// while the streams wait. (Until 2026-12-03 evening it was a #slow
	// answer, over after 2 s: the "waiting" streams were being served one
	// by one, each release moving every waiter's place.)
	go firstEvent(ctx, in.url+"/api/v1/chat", admin, map[string]any{"question": "holder #gate"}, func(string) bool { return false })
	llm.nextStart(b)
	rss0, _ := procStats(b, cmd.Process.Pid)
	m0 := goMetrics(b, in.url)

	tr := &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}
	client := &http.Client{Transport: tr}
	var queued atomic.Int32
	var (
		mu       sync.Mutex
		outcomes = map[string]int{} // a stream that never queued, by what it got instead
	)
	failed := func(why string) {
		mu.Lock()
		outcomes[why]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	open := func(from, to int) {
		for i := from; i < to; i++ {
			wg.Go(func() {
				body, _ := json.Marshal(map[string]any{"question": fmt.Sprintf("waiting %d", i)})
				req, _ := http.NewRequestWithContext(ctx, "POST", in.url+"/api/v1/chat", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tokens[i%users])
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						failed("transport: " + err.Error())
					}
					return
				}
				defer resp.Body.Close()
				sc := bufio.NewScanner(resp.Body)
				counted := false
				var first []string
				for sc.Scan() {
					if !counted && sc.Text() == "event: queue" {
						counted = true
						queued.Add(1)
					}
					if !counted && len(first) < 4 && sc.Text() != "" {
						first = append(first, sc.Text())
					}
				}
				if !counted && ctx.Err() == nil {
					failed(fmt.Sprintf("status %d, ended without a queue event: %q (read error %v)", resp.StatusCode, first, sc.Err()))
				}
			})
		}
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			n := len(outcomes)
			mu.Unlock()
			if int(queued.Load()) >= to || n > 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second) // settle; let other failures come in
		mu.Lock()
		defer mu.Unlock()
		if n := queued.Load(); int(n) < to || len(outcomes) > 0 {
			b.Fatalf("only %d of %d streams are queued; %d still waiting for their first event; the others: %v", n, to, to-int(n)-countsTotal(outcomes), outcomes)
		}
	}
	// Two steps: the first half also grows the connection pools (Postgres,
	// Redis) to their caps, a fixed cost; the second half costs only what a
	// waiting stream holds.
	open(0, streams/2)
	gc := func() {
		// The heap profile endpoint runs a GC first, so live memory is read.
		resp, err := http.Get("http://127.0.0.1:" + pprofPort + "/debug/pprof/heap?gc=1")
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	live := func(m map[string]float64) float64 {
		return m["go_memstats_heap_inuse_bytes"] + m["go_memstats_stack_inuse_bytes"]
	}
	gc()
	rssHalf, _ := procStats(b, cmd.Process.Pid)
	mHalf := goMetrics(b, in.url)
	open(streams/2, streams)
	gc()
	rss1, cpu1 := procStats(b, cmd.Process.Pid)
	m1 := goMetrics(b, in.url)
	for _, k := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes"} {
		b.Logf("%s: %.0f → %.0f → %.0f (per stream in the second half %.0f)", k, m0[k], mHalf[k], m1[k], (m1[k]-mHalf[k])/(streams/2))
	}
	const idle = 5 * time.Second
	idleWindow(b, pprofPort, idle)
	rss2, cpu2 := procStats(b, cmd.Process.Pid)
	var st struct{ PermitsInUse, QueueLength int }
	in.client(b, admin).do("GET", "/api/v1/admin/limiter", nil).json(b, &st)
	if st.PermitsInUse != 1 || st.QueueLength != streams {
		b.Fatalf("after the reading: %d permits in use and %d queued, want 1 and %d (the holder let go)", st.PermitsInUse, st.QueueLength, streams)
	}
	b.ReportMetric((live(m1)-live(mHalf))/(streams/2)/1024, "KiB/waiting-stream")
	b.ReportMetric(float64(rss1-rssHalf)/(streams/2)/1024, "KiB-rss/waiting-stream")
	b.ReportMetric(float64(rss1-rss0)/streams/1024, "KiB/stream-incl-pool-growth")
	b.ReportMetric(float64(rss0)/(1<<20), "MiB-rss-before")
	b.ReportMetric(float64(max(rss1, rss2))/(1<<20), "MiB-rss-with-streams")
	b.ReportMetric(100*(cpu2-cpu1).Seconds()/idle.Seconds(), "cpu%-idle-1000-waiting")
	cancel()
	wg.Wait()
}

// countsTotal adds up the counts by outcome.
func countsTotal(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

func waitHTTP(b *testing.B, url string) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Fatalf("%s not ready", url)
}

// procStats reads a process's resident set size (bytes) and CPU time.
func procStats(b *testing.B, pid int) (int64, time.Duration) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	var rss int64
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			rss = kb * 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return rss, time.Duration(utime+stime) * time.Second / clockTicks
}

// goMetrics reads the Go runtime gauges from /metrics.
func goMetrics(b *testing.B, base string) map[string]float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && strings.HasPrefix(f[0], "go_") {
			v, _ := strconv.ParseFloat(f[1], 64)
			out[f[0]] = v
		}
	}
	return out
}

// idleWindow waits out d while the streams wait. With
// RAGENT_BENCH_CPUPROFILE=path it is the instance's CPU profile of those d
// (its pprof endpoint on port), written to path for `go tool pprof`.
func idleWindow(b *testing.B, port string, d time.Duration) {
	path := os.Getenv("RAGENT_BENCH_CPUPROFILE")
	if path == "" {
		time.Sleep(d)
		return
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%s/debug/pprof/profile?seconds=%d", port, int(d.Seconds())))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	profile, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("CPU profile: %d %v", resp.StatusCode, err)
	}
	if err := os.WriteFile(path, profile, 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("CPU profile of the idle window: %s", path)
}
