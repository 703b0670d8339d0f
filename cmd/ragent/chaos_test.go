package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
)

// The Redis failover test (RELIABILITY.md; scripts/chaos.sh redis-failover):
// three instances share a Redis topology of the test's own, a fake model
// counts its concurrent calls, six users send 60 chats, and mid-load the
// Redis that holds the chat limiter goes: its primary SIGKILLed behind
// Sentinel, its master SIGKILLed in a Cluster, or the single node killed
// for 20 s and restarted empty. Meanwhile 30 documents are uploaded, every
// instance issues ids, and a stop is sent one second after the kill. The
// targets of issue 25 are asserted; the measurements are printed as one
// table.
//
// It runs with RAGENT_CHAOS=1 (its own step of make test, without the race
// detector: what it measures is timing).
const (
	chaosMaxConcurrent = 4
	chaosUsers         = 6
	chaosChats         = 60
	chaosDocs          = 30
	chaosMaxWait       = 10 * time.Second
	chaosOutage        = 20 * time.Second
	// chaosKillAfter chats answered, the Redis goes.
	chaosKillAfter = 15
)

func TestRedisFailoverChaos(t *testing.T) {
	if os.Getenv("RAGENT_CHAOS") != "1" {
		t.Skip("the Redis failover test runs with RAGENT_CHAOS=1 (scripts/chaos.sh redis-failover, make test)")
	}
	var results []*chaosResult
	for _, top := range []chaosTopology{&sentinelChaos{}, &clusterChaos{}, &outageChaos{}} {
		t.Run(top.name(), func(t *testing.T) {
			r := runChaos(t, top)
			results = append(results, r)
			r.check(t)
		})
	}
	printChaosTable(os.Stdout, results)
}

// chaosTopology is one scenario's Redis: it starts it, points a
// configuration at it, takes it away and says when it is back.
type chaosTopology interface {
	name() string
	start(t *testing.T, prefix string)
	configure(cfg *Config)
	// admin is a client that sees the limiter's keys (for leaked permits).
	admin(t *testing.T) redis.UniversalClient
	// kill takes the Redis away; recovered waits until it is back (the
	// promotion, or the restart) and returns when that was seen.
	kill(t *testing.T)
	recovered(t *testing.T) time.Time
	// setting is the failure detector's setting, printed beside the
	// recovery time.
	setting() string
}

// sentinelChaos: SIGKILL the primary; the Sentinels promote the replica.
type sentinelChaos struct{ s *testenv.SentinelTopology }

func (*sentinelChaos) name() string { return "sentinel" }
func (c *sentinelChaos) start(t *testing.T, _ string) {
	c.s = testenv.StartSentinelTopology(t, "chaos", time.Second)
}
func (c *sentinelChaos) configure(cfg *Config) {
	cfg.RedisURL = "redis://" + c.s.Primary.Addr + "/0" // the host is ignored
	cfg.RedisSentinelAddrs, cfg.RedisSentinelMaster = c.s.SentinelAddrs(), c.s.Master
	cfg.RedisClusterAddrs = nil
}
func (c *sentinelChaos) admin(t *testing.T) redis.UniversalClient {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: c.s.Master, SentinelAddrs: c.s.SentinelAddrs()})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
func (c *sentinelChaos) kill(*testing.T) { c.s.Primary.Kill() }
func (c *sentinelChaos) recovered(t *testing.T) time.Time {
	testenv.Eventually(t, 60*time.Second, "Sentinel to promote the replica", func() bool {
		return c.s.MasterAddr() == c.s.Replica.Addr
	})
	return time.Now()
}
func (c *sentinelChaos) setting() string {
	return fmt.Sprintf("down-after-milliseconds %d", c.s.DownAfter.Milliseconds())
}

// clusterChaos: SIGKILL the master of the chat limiter's slot; its replica
// takes over once the others see it fail.
type clusterChaos struct {
	c      *testenv.ClusterTopology
	key    string
	victim string
}

func (*clusterChaos) name() string { return "cluster" }
func (c *clusterChaos) start(t *testing.T, prefix string) {
	c.c = testenv.StartClusterTopology(t, time.Second)
	c.key = prefix + "{limiter:chat}:permits"
}
func (c *clusterChaos) configure(cfg *Config) {
	cfg.RedisURL = "redis://" + c.c.Nodes[0].Addr + "/0"
	cfg.RedisClusterAddrs, cfg.RedisSentinelAddrs, cfg.RedisSentinelMaster = c.c.Addrs(), nil, ""
}
func (c *clusterChaos) admin(t *testing.T) redis.UniversalClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.c.Addrs()})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
func (c *clusterChaos) kill(t *testing.T) {
	c.victim = c.c.Owner(c.key, "")
	n := c.c.Node(c.victim)
	if n == nil {
		t.Fatalf("no node serves %s", c.key)
	}
	n.Kill()
}
func (c *clusterChaos) recovered(t *testing.T) time.Time {
	testenv.Eventually(t, 60*time.Second, "the cluster to promote the killed master's replica", func() bool {
		owner := c.c.Owner(c.key, c.victim)
		return owner != "" && owner != c.victim
	})
	return time.Now()
}
func (c *clusterChaos) setting() string {
	return fmt.Sprintf("cluster-node-timeout %d", c.c.NodeTimeout.Milliseconds())
}

// outageChaos: the single node killed, away for 20 s, restarted empty.
type outageChaos struct {
	p      *testenv.RedisProc
	killed time.Time
}

const outageName = "outage"

func (*outageChaos) name() string { return outageName }
func (c *outageChaos) start(t *testing.T, _ string) {
	c.p = testenv.StartRedisServer(t)
}
func (c *outageChaos) configure(cfg *Config) {
	cfg.RedisURL = "redis://" + c.p.Addr + "/0"
	cfg.RedisSentinelAddrs, cfg.RedisSentinelMaster, cfg.RedisClusterAddrs = nil, "", nil
}
func (c *outageChaos) admin(t *testing.T) redis.UniversalClient {
	rdb := c.p.Client()
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
func (c *outageChaos) kill(*testing.T) { c.p.Kill(); c.killed = time.Now() }
func (c *outageChaos) recovered(t *testing.T) time.Time {
	// The outage is the scenario: 20 s, then Redis is back with nothing.
	time.Sleep(time.Until(c.killed.Add(chaosOutage)))
	c.p.Start(t)
	return time.Now()
}
func (c *outageChaos) setting() string {
	return fmt.Sprintf("away %v, back empty", chaosOutage)
}

// chaosResult is one scenario's row.
type chaosResult struct {
	topology, setting                 string
	maxCalls, maxCallsBefore          int32
	answered, failed, hung            int
	lateChats                         []string // chats that ended later than MaxWait + 5 s after the kill
	answeredAfterKill, recoveredAfter time.Duration
	docsNotReady                      int
	ids, duplicateIDs                 int
	stopAccepted, stopEnded           time.Duration // after the kill
	stopStopped                       bool
	leakedPermits                     int
	errors                            map[string]int // clear errors by kind
}

func (r *chaosResult) check(t *testing.T) {
	t.Helper()
	if r.maxCalls > chaosMaxConcurrent {
		t.Errorf("%s: %d model calls at once, cap %d", r.topology, r.maxCalls, chaosMaxConcurrent)
	}
	if r.hung > 0 || len(r.lateChats) > 0 {
		t.Errorf("%s: %d chats hung, %d ended later than %v after the kill: %v", r.topology, r.hung, len(r.lateChats), chaosMaxWait+5*time.Second, r.lateChats)
	}
	// ≥ 90 % answered is the failover target (issue #25: a promotion is
	// seconds). A 20 s outage is longer than the chats' MaxWait, so the
	// rule there is the cap, no hang and a clear error for the rest; its
	// answered count is printed, not asserted.
	if r.topology != outageName && r.answered*10 < chaosChats*9 {
		t.Errorf("%s: %d of %d chats answered, want ≥ 90 %% (errors %v)", r.topology, r.answered, chaosChats, r.errors)
	}
	if r.docsNotReady > 0 {
		t.Errorf("%s: %d of %d documents not ready", r.topology, r.docsNotReady, chaosDocs)
	}
	if r.duplicateIDs > 0 {
		t.Errorf("%s: %d duplicate ids among %d", r.topology, r.duplicateIDs, r.ids)
	}
	if !r.stopStopped {
		t.Errorf("%s: the stop sent after the kill did not stop its stream", r.topology)
	}
	if r.leakedPermits > 0 {
		t.Errorf("%s: %d permits left in Redis after the load", r.topology, r.leakedPermits)
	}
}

func printChaosTable(w io.Writer, rs []*chaosResult) {
	var b strings.Builder
	b.WriteString("\n| topology | max concurrent model calls (cap 4) | chats answered / clear error / hung (of 60) | first new chat answered after the kill | … after the recovery | failure detection | docs not ready (of 30) | duplicate ids (of issued) | stop sent 1 s after the kill | permits left |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		stop := "did not stop"
		if r.stopStopped {
			stop = fmt.Sprintf("stopped (accepted at +%.1f s, stream ended at +%.1f s)", r.stopAccepted.Seconds(), r.stopEnded.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %d | %d / %d / %d | %.1f s | %+.1f s | %s | %d | %d (of %d) | %s | %d |\n",
			r.topology, r.maxCalls, r.answered, r.failed, r.hung, r.answeredAfterKill.Seconds(),
			(r.answeredAfterKill - r.recoveredAfter).Seconds(), r.setting, r.docsNotReady, r.duplicateIDs, r.ids, stop, r.leakedPermits)
	}
	for _, r := range rs {
		if len(r.errors) > 0 {
			fmt.Fprintf(&b, "\n%s: clear errors %v", r.topology, r.errors)
		}
	}
	b.WriteString("\n")
	io.WriteString(w, b.String())
}

// chatOutcome is how one chat of the load ended.
type chatOutcome struct {
	start, end time.Time
	answered   bool
	err        string // the clear error, when not answered
	hung       bool
}

func runChaos(t *testing.T, top chaosTopology) *chaosResult {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	top.start(t, cfg.RedisPrefix)
	top.configure(&cfg)
	cfg.ChatMaxConcurrent, cfg.ChatMaxWait = chaosMaxConcurrent, chaosMaxWait
	cfg.ChatOnRedisError = "local"
	cfg.ChatMaxQueuedPerUser = 0
	ins := []*instance{start(t, cfg), start(t, cfg), start(t, cfg)}
	r := &chaosResult{topology: top.name(), errors: map[string]int{}}

	adminToken := ins[0].login(t, "admin", "admin-password")
	kb := seedKnowledge(t, ins[0], adminToken)
	ins[0].client(t, adminToken).makeInternal(kb)
	var tokens []string
	for u := range chaosUsers {
		name := fmt.Sprintf("chaos%d", u)
		ins[0].createUser(t, adminToken, name, name+"-password", "user")
		tokens = append(tokens, ins[u%len(ins)].login(t, name, name+"-password"))
	}

	// Ids: every instance issues one every millisecond through the
	// failover; the instances' own ids come from the same generators.
	idsDone := make(chan struct{})
	var idsWG sync.WaitGroup
	issued := make([][]int64, len(ins))
	for i, in := range ins {
		idsWG.Go(func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-idsDone:
					return
				case <-tick.C:
				}
				if id, err := in.app.ids.Next(); err == nil {
					issued[i] = append(issued[i], id)
				}
			}
		})
	}

	// The stop probe: an answer only a stop ends, running before the kill.
	stopQ := "stop probe #endless " + top.name()
	stopTask := make(chan string, 1)
	type stopStream struct {
		events []sseEvent
		end    time.Time
	}
	stopDone := make(chan stopStream, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sent := false
		_, events := chaosChat(ctx, ins[0].url, adminToken, stopQ, func(e sseEvent) {
			if e.Name == "meta" {
				var m struct{ TaskID string }
				json.Unmarshal([]byte(e.Data), &m)
				stopTask <- m.TaskID
			}
			if e.Name == "message" && !sent {
				sent = true
				stopTask <- "running"
			}
		})
		stopDone <- stopStream{events, time.Now()}
	}()
	task := <-stopTask
	if running := <-stopTask; running != "running" || task == "" {
		t.Fatalf("the stop probe did not start: task %q", task)
	}

	// The load: six users, ten chats each, one after the other, each to the
	// next instance.
	outcomes := make([]chatOutcome, chaosChats)
	var answered atomic.Int32
	killNow := make(chan struct{})
	var killOnce sync.Once
	var loadWG sync.WaitGroup
	for u := range chaosUsers {
		loadWG.Go(func() {
			for k := range chaosChats / chaosUsers {
				i := u*(chaosChats/chaosUsers) + k
				in := ins[(u+k)%len(ins)]
				o := &outcomes[i]
				o.start = time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), chaosMaxWait+30*time.Second)
				status, events := chaosChat(ctx, in.url, tokens[u], fmt.Sprintf("chat %d of user %d #medium", k, u), nil)
				o.end = time.Now()
				timedOut := ctx.Err() != nil
				cancel()
				switch seq := collapse(events); {
				case timedOut:
					o.hung = true
				case status == http.StatusOK && strings.Contains(seq, "message") && strings.HasSuffix(seq, "finish done") && !strings.Contains(seq, "error"):
					o.answered = true
					if answered.Add(1) == chaosKillAfter {
						killOnce.Do(func() { close(killNow) })
					}
				case status != http.StatusOK:
					o.err = fmt.Sprintf("HTTP %d", status)
				default:
					o.err = "stream: " + seq
					for _, e := range events {
						if e.Name == "reject" || e.Name == "error" {
							o.err += " " + e.Data
						}
					}
				}
			}
		})
	}
	loadOver := make(chan struct{})
	go func() { loadWG.Wait(); close(loadOver) }()
	select {
	case <-killNow:
	case <-loadOver:
		t.Fatalf("the load ended before %d chats were answered", chaosKillAfter)
	}

	r.maxCallsBefore = llm.maxCalls.Load()
	top.kill(t)
	killedAt := time.Now()
	t.Logf("%s: Redis killed (%d model calls at once so far)", top.name(), r.maxCallsBefore)

	// The stop, one second after the kill, through another instance,
	// retried while refused.
	stopResult := make(chan time.Duration, 1)
	go func() {
		time.Sleep(time.Until(killedAt.Add(time.Second)))
		for time.Since(killedAt) < 60*time.Second {
			switch chaosPost(ins[1].url+"/api/v1/chat/tasks/"+task+"/stop", adminToken) {
			case http.StatusOK:
				stopResult <- time.Since(killedAt)
				return
			case http.StatusNotFound:
				// The task is gone: an earlier attempt answered 503
				// (Redis refused part of the send) but the stop it
				// remembered, re-sent, took effect. Whether it stopped
				// the model is judged from the stream below.
				stopResult <- time.Since(killedAt)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		stopResult <- -1
	}()

	// 30 documents, one every 100 ms from the kill, retried while refused
	// (as a client honouring 503 and Retry-After would).
	docIDs := make([]string, chaosDocs)
	var docsWG sync.WaitGroup
	for d := range chaosDocs {
		docsWG.Go(func() {
			time.Sleep(time.Until(killedAt.Add(time.Duration(d) * 100 * time.Millisecond)))
			for time.Since(killedAt) < 90*time.Second {
				id, retry := chaosUpload(ins[d%len(ins)].url, adminToken, kb, d)
				if id != "" {
					docIDs[d] = id
					return
				}
				time.Sleep(retry)
			}
		})
	}

	recoveredAt := top.recovered(t)
	r.setting = top.setting()
	r.recoveredAfter = recoveredAt.Sub(killedAt)
	t.Logf("%s: recovered %v after the kill", top.name(), r.recoveredAfter)

	<-loadOver
	docsWG.Wait()

	// The stop.
	r.stopAccepted = <-stopResult
	select {
	case s := <-stopDone:
		r.stopEnded = s.end.Sub(killedAt)
		_, aborted := llm.abandonedAt(stopQ)
		r.stopStopped = r.stopAccepted > 0 && strings.Contains(collapse(s.events), "cancel") && aborted
		if !r.stopStopped {
			t.Logf("%s: stop accepted at %v (-1: never), stream ended at +%v with %q, model call aborted: %v",
				top.name(), r.stopAccepted, r.stopEnded, collapse(s.events), aborted)
		}
	case <-time.After(30 * time.Second):
		t.Logf("%s: stop accepted at %v (-1: never); the probe's stream had not ended 30 s after the load", top.name(), r.stopAccepted)
	}

	// The chats.
	limit := chaosMaxWait + 5*time.Second
	for i, o := range outcomes {
		switch {
		case o.hung:
			r.hung++
		case o.answered:
			r.answered++
			if o.start.After(killedAt) && (r.answeredAfterKill == 0 || o.end.Sub(killedAt) < r.answeredAfterKill) {
				r.answeredAfterKill = o.end.Sub(killedAt)
			}
		default:
			r.failed++
			r.errors[o.err]++
		}
		if from := maxTime(o.start, killedAt); o.end.Sub(from) > limit {
			r.lateChats = append(r.lateChats, fmt.Sprintf("chat %d ended %.1f s after %v", i, o.end.Sub(from).Seconds(), from.Sub(killedAt)))
		}
	}
	r.maxCalls = llm.maxCalls.Load()

	// The documents.
	c := ins[2].client(t, adminToken)
	deadline := time.Now().Add(90 * time.Second)
	for _, id := range docIDs {
		if id == "" {
			r.docsNotReady++
			continue
		}
		for {
			d := c.document(id)
			if d.Status == "ready" {
				break
			}
			if d.Status == "failed" || time.Now().After(deadline) {
				t.Logf("document %s: %s %s", id, d.Status, d.Error)
				r.docsNotReady++
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// The ids.
	close(idsDone)
	idsWG.Wait()
	var all []int64
	for _, s := range issued {
		all = append(all, s...)
	}
	slices.Sort(all)
	r.ids = len(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			r.duplicateIDs++
		}
	}

	// No permit is left once every chat has ended: the releases reached
	// Redis (a permit lost instead would stay until its lease ends).
	admin := top.admin(t)
	permits := cfg.RedisPrefix + "{limiter:chat}:permits"
	var left int64
	for end := time.Now().Add(10 * time.Second); ; {
		left, _ = admin.ZCard(context.Background(), permits).Result()
		if left == 0 || time.Now().After(end) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.leakedPermits = int(left)
	return r
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// chaosChat sends one chat and reads its stream; it never fails the test
// (the load counts what happened).
func chaosChat(ctx context.Context, base, token, question string, onEvent func(sseEvent)) (int, []sseEvent) {
	b, _ := json.Marshal(map[string]any{"question": question})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/chat", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, readEvents(resp.Body, func(e sseEvent) bool {
		if onEvent != nil {
			onEvent(e)
		}
		return true
	})
}

func chaosPost(url, token string) int {
	req, _ := http.NewRequest("POST", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// chaosUpload uploads document d; it returns its id, or how long to wait
// before a retry.
func chaosUpload(base, token, kb string, d int) (string, time.Duration) {
	text := fmt.Sprintf("# Failover note %d\n\nDocument %d was uploaded while Redis failed over.\n", d, d)
	resp, err := http.DefaultClient.Do(uploadRequest(base, token, kb, fmt.Sprintf("failover-%02d.md", d), []byte(text)))
	if err != nil {
		return "", 200 * time.Millisecond
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusAccepted {
		var doc docJSON
		if json.Unmarshal(body, &doc) == nil && doc.ID != "" {
			return doc.ID, 0
		}
	}
	retry := 200 * time.Millisecond
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		retry = min(time.Duration(s)*time.Second, time.Second)
	}
	return "", retry
}
