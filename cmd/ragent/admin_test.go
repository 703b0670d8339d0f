package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/idempotent"
	"github.com/ragent-go/ragent/internal/testenv"
)

type intentJSON struct {
	ID               string
	ParentID         string
	Code             string
	Name             string
	Kind             string
	KnowledgeBaseIDs []string
	Enabled          bool
	Path             string
	Children         []intentJSON
}

type termJSON struct {
	ID         string
	SourceTerm string
	TargetTerm string
	Priority   int
	Enabled    bool
}

// adminSetup starts an instance and returns an admin client with two
// knowledge bases.
func adminSetup(t *testing.T, cfg Config) (in *instance, c *client, kb1, kb2 string) {
	t.Helper()
	in = start(t, cfg)
	c = in.adminClient(t)
	return in, c, c.createKB("it-docs"), c.createKB("hr-docs")
}

func mustIntent(t *testing.T, c *client, method, path string, body map[string]any, want int) intentJSON {
	t.Helper()
	r := c.do(method, path, body)
	if r.Status != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, r.Status, r.Body, want)
	}
	var n intentJSON
	r.json(t, &n)
	return n
}

func tree(t *testing.T, c *client) []intentJSON {
	t.Helper()
	return getItems[intentJSON](c.forTest(t), "/api/v1/admin/intents")
}

// paths lists "path(enabled)" depth-first.
func paths(nodes []intentJSON) string {
	var out []string
	var walk func([]intentJSON)
	walk = func(ns []intentJSON) {
		for _, n := range ns {
			s := n.Path
			if !n.Enabled {
				s += " (off)"
			}
			out = append(out, s)
			walk(n.Children)
		}
	}
	walk(nodes)
	return strings.Join(out, " | ")
}

func TestIntentTreeCRUDAndValidation(t *testing.T) {
	_, c, kb1, kb2 := adminSetup(t, testConfig(t))
	const base = "/api/v1/admin/intents"
	node := func(code, name, parent string, kbs ...string) map[string]any {
		m := map[string]any{"code": code, "name": name, "kind": "kb", "knowledgeBaseIds": kbs,
			"examples": []string{" how do I connect? ", ""}, "description": "d"}
		if parent != "" {
			m["parentId"] = parent
		}
		return m
	}
	if got := tree(t, c); len(got) != 0 {
		t.Fatalf("empty tree: %+v", got)
	}
	it := mustIntent(t, c, "POST", base, node("it", "IT support", "", kb1), http.StatusCreated)
	vpn := mustIntent(t, c, "POST", base, node("it.vpn", "VPN", it.ID, kb1, kb2, kb1), http.StatusCreated)
	mac := mustIntent(t, c, "POST", base, node("it.vpn.mac", "Mac client", vpn.ID, kb1), http.StatusCreated)
	hr := mustIntent(t, c, "POST", base, map[string]any{"code": "chitchat", "name": "Small talk", "kind": "system", "sort": -1}, http.StatusCreated)
	if vpn.Path != "IT support > VPN" || mac.Path != "IT support > VPN > Mac client" || !vpn.Enabled || len(vpn.KnowledgeBaseIDs) != 2 {
		t.Fatalf("created nodes: %+v %+v", vpn, mac)
	}
	if got, want := paths(tree(t, c)), "Small talk | IT support | IT support > VPN | IT support > VPN > Mac client"; got != want {
		t.Fatalf("tree %q, want %q", got, want)
	}

	invalid := []struct {
		name   string
		body   map[string]any
		status int
		code   string
	}{
		{"missing code", node("", "x", "", kb1), 400, "invalid"},
		{"code with spaces", node("a b", "x", "", kb1), 400, "invalid"},
		{"taken code", node("it.vpn", "x", "", kb1), 409, "conflict"},
		{"taken code in another case", node("IT.VPN", "x", "", kb1), 409, "conflict"},
		{"missing name", node("n1", " ", "", kb1), 400, "invalid"},
		{"name with the path separator", node("n1", "a > b", "", kb1), 400, "invalid"},
		{"unknown kind", map[string]any{"code": "n1", "name": "x", "kind": "faq"}, 400, "invalid"},
		{"kb intent without knowledge bases", node("n1", "x", ""), 400, "invalid"},
		{"system intent with knowledge bases", map[string]any{"code": "n1", "name": "x", "kind": "system", "knowledgeBaseIds": []string{kb1}}, 400, "invalid"},
		{"unknown knowledge base", node("n1", "x", "", "123456789"), 400, "invalid"},
		{"missing parent", node("n1", "x", "987654321", kb1), 400, "invalid"},
		{"deeper than three levels", node("n1", "x", mac.ID, kb1), 400, "invalid"},
		{"unknown field", map[string]any{"code": "n1", "name": "x", "kind": "system", "colour": "red"}, 400, "malformed_json"},
		{"bad parent id", map[string]any{"code": "n1", "name": "x", "kind": "system", "parentId": "abc"}, 400, "malformed_json"},
	}
	for _, tt := range invalid {
		t.Run("create/"+tt.name, func(t *testing.T) {
			r := c.do("POST", base, tt.body)
			if r.Status != tt.status || r.errorCode(t) != tt.code {
				t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, tt.status, tt.code)
			}
		})
	}

	moves := []struct {
		name   string
		id     string
		body   map[string]any
		status int
	}{
		{"under itself", it.ID, node("it", "IT support", it.ID, kb1), 400},
		{"under its descendant (cycle)", it.ID, node("it", "IT support", mac.ID, kb1), 400},
		{"a three-level subtree under a root", it.ID, node("it", "IT support", hr.ID, kb1), 400},
		{"two-level subtree below level two", vpn.ID, node("it.vpn", "VPN", vpn.ID, kb1), 400},
		{"unknown node", "111", node("zz", "x", "", kb1), 404},
		{"taken code", vpn.ID, node("it", "VPN", it.ID, kb1), 409},
	}
	for _, tt := range moves {
		t.Run("update/"+tt.name, func(t *testing.T) {
			if r := c.do("PUT", base+"/"+tt.id, tt.body); r.Status != tt.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Body, tt.status)
			}
		})
	}

	// Move the leaf to the other root, rename and disable a node.
	moved := mustIntent(t, c, "PUT", base+"/"+mac.ID, map[string]any{"code": "it.vpn.mac", "name": "Mac client",
		"kind": "system", "parentId": hr.ID}, http.StatusOK)
	if moved.Path != "Small talk > Mac client" || moved.ParentID != hr.ID {
		t.Fatalf("moved: %+v", moved)
	}
	body := node("it.vpn", "VPN access", it.ID, kb2)
	body["enabled"] = false
	mustIntent(t, c, "PUT", base+"/"+vpn.ID, body, http.StatusOK)
	if got, want := paths(tree(t, c)), "Small talk | Small talk > Mac client | IT support | IT support > VPN access (off)"; got != want {
		t.Fatalf("tree %q, want %q", got, want)
	}
	// A root may move under another root once it is two levels deep;
	// siblings are ordered by sort, then creation.
	mustIntent(t, c, "PUT", base+"/"+it.ID, node("it", "IT support", hr.ID, kb1), http.StatusOK)
	if got, want := paths(tree(t, c)), "Small talk | Small talk > IT support | Small talk > IT support > VPN access (off) | Small talk > Mac client"; got != want {
		t.Fatalf("tree %q, want %q", got, want)
	}

	// Deletes.
	for _, tt := range []struct {
		name, path string
		status     int
	}{
		{"with children, no cascade", base + "/" + hr.ID, 409},
		{"cascade not a boolean", base + "/" + hr.ID + "?cascade=yes", 400},
		{"unknown node", base + "/404404", 404},
		{"leaf", base + "/" + moved.ID, 204},
		{"subtree with cascade", base + "/" + hr.ID + "?cascade=true", 204},
	} {
		if r := c.do("DELETE", tt.path, nil); r.Status != tt.status {
			t.Fatalf("delete %s: %d %s, want %d", tt.name, r.Status, r.Body, tt.status)
		}
	}
	if got := tree(t, c); len(got) != 0 {
		t.Fatalf("tree after deleting everything: %+v", got)
	}
	// The freed code can be used again.
	mustIntent(t, c, "POST", base, node("it", "IT support", "", kb1), http.StatusCreated)
}

func TestTermMappingsCRUDAndValidation(t *testing.T) {
	_, c, _, _ := adminSetup(t, testConfig(t))
	const base = "/api/v1/admin/term-mappings"
	create := func(body map[string]any, want int) termJSON {
		t.Helper()
		r := c.do("POST", base, body)
		if r.Status != want {
			t.Fatalf("create %v: %d %s, want %d", body, r.Status, r.Body, want)
		}
		var m termJSON
		if want == http.StatusCreated {
			r.json(t, &m)
		}
		return m
	}
	r := c.do("GET", base, nil)
	if r.Status != http.StatusOK || string(r.Body) != `{"items":[],"nextCursor":null}` {
		t.Fatalf("empty list: %d %s", r.Status, r.Body)
	}
	logs := create(map[string]any{"sourceTerm": " 那个打日志的 ", "targetTerm": "SLS 日志服务", "priority": 5}, http.StatusCreated)
	if logs.SourceTerm != "那个打日志的" || !logs.Enabled || logs.Priority != 5 {
		t.Fatalf("created %+v", logs)
	}
	vpn := create(map[string]any{"sourceTerm": "VPN", "targetTerm": "虚拟专用网"}, http.StatusCreated)

	for _, tt := range []struct {
		name   string
		body   map[string]any
		status int
		code   string
	}{
		{"empty source", map[string]any{"sourceTerm": "  ", "targetTerm": "x"}, 400, "invalid"},
		{"empty target", map[string]any{"sourceTerm": "x", "targetTerm": ""}, 400, "invalid"},
		{"target equals source", map[string]any{"sourceTerm": "x", "targetTerm": "x"}, 400, "invalid"},
		{"source too long", map[string]any{"sourceTerm": strings.Repeat("长", 101), "targetTerm": "x"}, 400, "invalid"},
		{"target too long", map[string]any{"sourceTerm": "x", "targetTerm": strings.Repeat("长", 201)}, 400, "invalid"},
		{"priority out of range", map[string]any{"sourceTerm": "x", "targetTerm": "y", "priority": 5000}, 400, "invalid"},
		{"enabled duplicate", map[string]any{"sourceTerm": "VPN", "targetTerm": "other"}, 409, "conflict"},
		{"enabled duplicate in another case", map[string]any{"sourceTerm": "vpn", "targetTerm": "other"}, 409, "conflict"},
		{"unknown field", map[string]any{"sourceTerm": "x", "targetTerm": "y", "weight": 1}, 400, "malformed_json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := c.do("POST", base, tt.body)
			if r.Status != tt.status || r.errorCode(t) != tt.code {
				t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, tt.status, tt.code)
			}
			if tt.status == 409 && !strings.Contains(string(r.Body), "already exists") {
				t.Fatalf("conflict message unclear: %s", r.Body)
			}
		})
	}

	// A disabled duplicate is allowed; enabling it while the other is enabled is not.
	off := create(map[string]any{"sourceTerm": "VPN", "targetTerm": "old VPN", "enabled": false}, http.StatusCreated)
	if off.Enabled {
		t.Fatal("created enabled despite enabled=false")
	}
	put := func(id string, body map[string]any, want int) {
		t.Helper()
		if r := c.do("PUT", base+"/"+id, body); r.Status != want {
			t.Fatalf("PUT %s %v: %d %s, want %d", id, body, r.Status, r.Body, want)
		}
	}
	put(off.ID, map[string]any{"sourceTerm": "VPN", "targetTerm": "old VPN", "enabled": true}, http.StatusConflict)
	put(vpn.ID, map[string]any{"sourceTerm": "VPN", "targetTerm": "虚拟专用网", "enabled": false}, http.StatusOK)
	put(off.ID, map[string]any{"sourceTerm": "VPN", "targetTerm": "old VPN", "priority": 9}, http.StatusOK)
	put("424242", map[string]any{"sourceTerm": "a", "targetTerm": "b"}, http.StatusNotFound)
	put(logs.ID, map[string]any{"sourceTerm": "", "targetTerm": "b"}, http.StatusBadRequest)

	var list struct {
		Items      []termJSON
		NextCursor *string
	}
	c.do("GET", base, nil).json(t, &list)
	var got []string
	for _, m := range list.Items {
		got = append(got, fmt.Sprintf("%s→%s/%d/%v", m.SourceTerm, m.TargetTerm, m.Priority, m.Enabled))
	}
	if want := "VPN→old VPN/9/true | 那个打日志的→SLS 日志服务/5/true | VPN→虚拟专用网/0/false"; strings.Join(got, " | ") != want || list.NextCursor != nil {
		t.Fatalf("list %q (cursor %v), want %q", strings.Join(got, " | "), list.NextCursor, want)
	}

	if r := c.do("DELETE", base+"/"+vpn.ID, nil); r.Status != http.StatusNoContent {
		t.Fatalf("delete: %d", r.Status)
	}
	if r := c.do("DELETE", base+"/"+vpn.ID, nil); r.Status != http.StatusNotFound {
		t.Fatalf("delete again: %d, want 404", r.Status)
	}
}

func TestAdminWritesInvalidateCaches(t *testing.T) {
	cfg := testConfig(t)
	_, c, kb1, _ := adminSetup(t, cfg)
	rdb := testenv.Redis(t)
	ctx := context.Background()
	treeKey, termsKey := cfg.RedisPrefix+"intent:tree", cfg.RedisPrefix+"query-term:mappings"

	var rootID, termID string
	writes := []struct {
		name  string
		key   string
		list  string
		write func() response
		check func(body string) bool
	}{
		{"create intent", treeKey, "/api/v1/admin/intents", func() response {
			r := c.do("POST", "/api/v1/admin/intents", map[string]any{"code": "it", "name": "IT", "kind": "kb", "knowledgeBaseIds": []string{kb1}})
			var n intentJSON
			r.json(t, &n)
			rootID = n.ID
			return r
		}, func(b string) bool { return strings.Contains(b, `"IT"`) }},
		{"update intent", treeKey, "/api/v1/admin/intents", func() response {
			return c.do("PUT", "/api/v1/admin/intents/"+rootID, map[string]any{"code": "it", "name": "IT support", "kind": "system"})
		}, func(b string) bool { return strings.Contains(b, `"IT support"`) }},
		{"delete intent", treeKey, "/api/v1/admin/intents", func() response {
			return c.do("DELETE", "/api/v1/admin/intents/"+rootID, nil)
		}, func(b string) bool { return b == `{"items":[]}` }},
		{"create mapping", termsKey, "/api/v1/admin/term-mappings", func() response {
			r := c.do("POST", "/api/v1/admin/term-mappings", map[string]any{"sourceTerm": "k8s", "targetTerm": "Kubernetes"})
			var m termJSON
			r.json(t, &m)
			termID = m.ID
			return r
		}, func(b string) bool { return strings.Contains(b, "Kubernetes") }},
		{"update mapping", termsKey, "/api/v1/admin/term-mappings", func() response {
			return c.do("PUT", "/api/v1/admin/term-mappings/"+termID, map[string]any{"sourceTerm": "k8s", "targetTerm": "K8s cluster"})
		}, func(b string) bool { return strings.Contains(b, "K8s cluster") }},
		{"delete mapping", termsKey, "/api/v1/admin/term-mappings", func() response {
			return c.do("DELETE", "/api/v1/admin/term-mappings/"+termID, nil)
		}, func(b string) bool { return strings.HasPrefix(b, `{"items":[]`) }},
	}
	for _, w := range writes {
		// Prime the cache, then write: the key must be gone and the next
		// read must show the change.
		if r := c.do("GET", w.list, nil); r.Status != http.StatusOK {
			t.Fatalf("%s: prime: %d", w.name, r.Status)
		}
		if rdb.Exists(ctx, w.key).Val() != 1 {
			t.Fatalf("%s: %s not cached after a read", w.name, w.key)
		}
		if ttl := rdb.PTTL(ctx, w.key).Val(); ttl < 7*24*time.Hour-time.Minute || ttl > 7*24*time.Hour {
			t.Fatalf("%s: TTL %v, want about 7 days", w.name, ttl)
		}
		if r := w.write(); r.Status >= 300 {
			t.Fatalf("%s: %d %s", w.name, r.Status, r.Body)
		}
		if rdb.Exists(ctx, w.key).Val() != 0 {
			t.Fatalf("%s: %s still cached after the write", w.name, w.key)
		}
		if r := c.do("GET", w.list, nil); !w.check(string(r.Body)) {
			t.Fatalf("%s: read after the write: %s", w.name, r.Body)
		}
	}
}

func TestAdminReadsWithRedisDown(t *testing.T) {
	cfg := testConfig(t)
	proxy, url := testenv.RedisProxyURL(t)
	cfg.RedisURL = url
	cfg.WorkerID = 9 // no Redis lease needed
	in, c, kb1, _ := adminSetup(t, cfg)
	mustIntent(t, c, "POST", "/api/v1/admin/intents", map[string]any{"code": "it", "name": "IT", "kind": "kb", "knowledgeBaseIds": []string{kb1}}, http.StatusCreated)
	if r := c.do("POST", "/api/v1/admin/term-mappings", map[string]any{"sourceTerm": "k8s", "targetTerm": "Kubernetes"}); r.Status != http.StatusCreated {
		t.Fatalf("create mapping: %d", r.Status)
	}

	proxy.Down()
	t.Cleanup(proxy.Up)
	if got := paths(tree(t, c)); got != "IT" {
		t.Fatalf("tree with Redis down: %q", got)
	}
	if r := c.do("GET", "/api/v1/admin/term-mappings", nil); r.Status != http.StatusOK || !strings.Contains(string(r.Body), "Kubernetes") {
		t.Fatalf("mappings with Redis down: %d %s", r.Status, r.Body)
	}
	// Writes still go through: the submit guard and the invalidation degrade.
	if r := c.do("POST", "/api/v1/admin/term-mappings", map[string]any{"sourceTerm": "OA", "targetTerm": "办公系统"},
		"Idempotency-Key", "down-1"); r.Status != http.StatusCreated {
		t.Fatalf("write with Redis down: %d %s", r.Status, r.Body)
	}
	if r := c.do("GET", "/api/v1/admin/term-mappings", nil); !strings.Contains(string(r.Body), "办公系统") {
		t.Fatalf("read after a write with Redis down: %s", r.Body)
	}
	metrics := string(in.client(t, "").do("GET", "/metrics", nil).Body)
	for _, want := range []string{`ragent_cache_fallback_total{cache="intent_tree"}`, `ragent_cache_fallback_total{cache="term_mappings"}`} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("metrics lack %s", want)
		}
	}
}

func TestIdempotentAdminSubmits(t *testing.T) {
	cfg := testConfig(t)
	in, c, _, _ := adminSetup(t, cfg)
	const base = "/api/v1/admin/term-mappings"

	t.Run("50 identical concurrent creates", func(t *testing.T) {
		const n = 50
		statuses := make(chan response, n)
		testenv.Together(n, func(int) {
			statuses <- c.do("POST", base, map[string]any{"sourceTerm": "报销单", "targetTerm": "费用报销申请"})
		})
		close(statuses)
		created, dup, inFlight := 0, 0, 0
		for r := range statuses {
			switch {
			case r.Status == http.StatusCreated:
				created++
			case r.Status == http.StatusConflict:
				// In flight: duplicate_request; arrived after the first
				// finished: the enabled-source conflict (the DB's last line).
				dup++
				if r.errorCode(t) == "duplicate_request" {
					inFlight++
				}
			default:
				t.Errorf("unexpected %d %s", r.Status, r.Body)
			}
		}
		var list struct{ Items []termJSON }
		c.do("GET", base, nil).json(t, &list)
		if created != 1 || dup != n-1 || len(list.Items) != 1 {
			t.Fatalf("created=%d conflicts=%d rows=%d; want 1, %d, 1", created, dup, len(list.Items), n-1)
		}
		// How many the lock refused depends on scheduling (the subtest above
		// checks the lock itself); the outcome must not.
		t.Logf("%d of %d duplicates refused by the submit lock, the rest by the unique source term", inFlight, dup)
		keys := testenv.Redis(t).Keys(context.Background(), cfg.RedisPrefix+"idem:submit:*").Val()
		if len(keys) != 0 {
			t.Fatalf("submit locks left: %v", keys)
		}
	})

	// The submit lock refuses a duplicate of a request still in flight. The
	// first request is held inside its handler (its INSERT waits on a table
	// lock this test holds), so the duplicate surely overlaps it: no timing
	// luck decides whether the lock or the unique key answers.
	t.Run("duplicate of a request in flight", func(t *testing.T) {
		ctx := context.Background()
		db := connectDB(t, cfg.DatabaseURL)
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "LOCK TABLE term_mappings IN EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		// waiters counts the writes blocked on the table lock.
		waiters := func() int {
			t.Helper()
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks
				WHERE relation = 'term_mappings'::regclass AND NOT granted`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		body := map[string]any{"sourceTerm": "差旅", "targetTerm": "差旅费用报销"}
		send := func() <-chan response {
			ch := make(chan response, 1)
			go func() { ch <- c.forTest(t).do("POST", base, body) }()
			return ch
		}
		first := send()
		testenv.Eventually(t, 30*time.Second, "the first create to reach its INSERT", func() bool { return waiters() >= 1 })
		// The first holds the submit lock and waits in Postgres. The
		// duplicate must be answered at once; if it joins the wait
		// instead, the lock let it through.
		second := send()
		var dup response
	wait:
		for {
			select {
			case dup = <-second:
				break wait
			default:
			}
			if waiters() > 1 {
				t.Fatal("the duplicate create reached the database: the submit lock did not refuse it")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if dup.Status != http.StatusConflict || dup.errorCode(t) != "duplicate_request" {
			t.Fatalf("duplicate in flight: %d %s, want 409 duplicate_request", dup.Status, dup.Body)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if r := <-first; r.Status != http.StatusCreated {
			t.Fatalf("first create: %d %s", r.Status, r.Body)
		}
		var list struct{ Items []termJSON }
		c.do("GET", base, nil).json(t, &list)
		n := 0
		for _, m := range list.Items {
			if m.SourceTerm == "差旅" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d mappings for the source term, want 1", n)
		}
	})

	t.Run("Idempotency-Key", func(t *testing.T) {
		key := []string{"Idempotency-Key", "create-oa"}
		first := c.do("POST", base, map[string]any{"sourceTerm": "OA", "targetTerm": "办公自动化"}, key...)
		again := c.do("POST", base, map[string]any{"targetTerm": "办公自动化", "sourceTerm": "OA"}, key...)
		if first.Status != http.StatusCreated || again.Status != http.StatusCreated || string(again.Body) != string(first.Body) ||
			again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: first %d %s, again %d %s %v", first.Status, first.Body, again.Status, again.Body, again.Header)
		}
		if r := c.do("POST", base, map[string]any{"sourceTerm": "OA", "targetTerm": "other"}, key...); r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("same key, other payload: %d %s, want 422", r.Status, r.Body)
		}
		// Keys are per user: another admin's request with the same key runs.
		in.createUser(t, c.token, "admin2", "admin2-password", "admin")
		other := in.client(t, in.login(t, "admin2", "admin2-password"))
		if r := other.do("POST", base, map[string]any{"sourceTerm": "HR", "targetTerm": "人力资源"}, key...); r.Status != http.StatusCreated ||
			r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("other user, same key: %d %v", r.Status, r.Header)
		}

		// A request whose key another instance is still processing gets 409.
		var me struct{ ID string }
		c.do("GET", "/api/v1/me", nil).json(t, &me)
		body := []byte(`{"sourceTerm":"ERP","targetTerm":"企业资源计划"}`)
		responses := idempotent.NewResponses(testenv.Redis(t), cfg.RedisPrefix, time.Minute, time.Hour, idempotent.Config{})
		outcome, _, err := responses.Begin(context.Background(), me.ID, "in-flight", idempotent.PayloadHash("POST", base, body))
		if err != nil || outcome != idempotent.Proceed {
			t.Fatalf("claim: %v %v", outcome, err)
		}
		if r := c.do("POST", base, body, "Idempotency-Key", "in-flight"); r.Status != http.StatusConflict || r.errorCode(t) != "duplicate_request" {
			t.Fatalf("key in flight: %d %s, want 409 duplicate_request", r.Status, r.Body)
		}
	})
}

// Two admins moving two roots under each other at once must not create a
// cycle: the writes validate under one tree lock, so the second sees the
// first's move.
func TestConcurrentIntentMovesKeepTheTreeAcyclic(t *testing.T) {
	_, c, kb1, _ := adminSetup(t, testConfig(t))
	const base = "/api/v1/admin/intents"
	for round := range 10 {
		a := mustIntent(t, c, "POST", base, map[string]any{"code": fmt.Sprint("a", round), "name": "A", "kind": "system"}, http.StatusCreated)
		b := mustIntent(t, c, "POST", base, map[string]any{"code": fmt.Sprint("b", round), "name": "B", "kind": "kb", "knowledgeBaseIds": []string{kb1}}, http.StatusCreated)
		var wg sync.WaitGroup
		statuses := make([]int, 2)
		wg.Go(func() {
			statuses[0] = c.do("PUT", base+"/"+a.ID, map[string]any{"code": a.Code, "name": "A", "kind": "system", "parentId": b.ID}).Status
		})
		wg.Go(func() {
			statuses[1] = c.do("PUT", base+"/"+b.ID, map[string]any{"code": b.Code, "name": "B", "kind": "kb", "knowledgeBaseIds": []string{kb1}, "parentId": a.ID}).Status
		})
		wg.Wait()
		ok := 0
		for _, s := range statuses {
			if s == http.StatusOK {
				ok++
			} else if s != http.StatusBadRequest {
				t.Fatalf("round %d: move answered %d", round, s)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d of two crossing moves succeeded, want exactly 1", round, ok)
		}
		if got := paths(tree(t, c)); strings.Count(got, " > ") != 1 {
			t.Fatalf("round %d: tree %q", round, got)
		}
		if r := c.do("DELETE", base+"/"+a.ID+"?cascade=true", nil); r.Status != http.StatusNoContent {
			if r = c.do("DELETE", base+"/"+b.ID+"?cascade=true", nil); r.Status != http.StatusNoContent {
				t.Fatalf("cleanup: %d", r.Status)
			}
		}
		c.do("DELETE", base+"/"+a.ID, nil)
		c.do("DELETE", base+"/"+b.ID, nil)
	}
}
