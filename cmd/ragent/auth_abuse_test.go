package main

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
)

// abuseStart starts an instance behind a trusted proxy (loopback), so each
// request can claim its own client address with X-Forwarded-For.
func abuseStart(t *testing.T, tune func(*Config)) (*instance, Config) {
	t.Helper()
	cfg := testConfig(t)
	cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	if tune != nil {
		tune(&cfg)
	}
	return start(t, cfg), cfg
}

func loginFrom(c *client, ip, username, password string, headers ...string) response {
	c.t.Helper()
	return c.do("POST", "/api/v1/auth/login", map[string]string{"username": username, "password": password},
		append([]string{"X-Forwarded-For", ip}, headers...)...)
}

// Usernames and passwords longer than any stored one are refused with 400
// before they reach Redis, the audit log's index or a log line; counter keys
// never carry the username.
func TestLoginInputIsBounded(t *testing.T) {
	in, cfg := abuseStart(t, nil)
	anon := in.client(t, "")
	huge := strings.Repeat("a", 512<<10)
	for _, tt := range []struct{ name, username, password, field string }{
		{"512 KB username", huge, "whatever-pw", "username"},
		{"65-character username", strings.Repeat("b", 65), "whatever-pw", "username"},
		{"73-byte password", "admin", strings.Repeat("p", 73), "password"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := loginFrom(anon, "203.0.113.1", tt.username, tt.password)
			if r.Status != http.StatusBadRequest || r.errorCode(t) != "invalid" || !strings.Contains(string(r.Body), tt.field) {
				t.Fatalf("got %d %.200s, want 400 invalid naming %s", r.Status, r.Body, tt.field)
			}
		})
	}
	// A 64-character username is a normal failed login, counted under a hash.
	long := strings.Repeat("c", 64)
	if r := loginFrom(anon, "203.0.113.2", long, "whatever-pw"); r.Status != http.StatusUnauthorized {
		t.Fatalf("64-character username: %d %s", r.Status, r.Body)
	}
	rdb := testenv.Redis(t)
	keys, err := rdb.Keys(context.Background(), cfg.RedisPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, long) || len(k) > 200 {
			t.Errorf("Redis key %.120q… (%d bytes) carries the username", k, len(k))
		}
	}
	for _, e := range auditEvents(t, in.adminClient(t), "action=auth.login") {
		if len(e.TargetID) > 128 || len(e.Detail) > 2000 {
			t.Errorf("audit event with a %d-byte target and %d-byte detail", len(e.TargetID), len(e.Detail))
		}
	}
}

// A logged-out token stays logged out when Redis loses every key (an
// eviction under memory pressure, a restart without persistence): the
// revocation is in Postgres.
func TestLogoutSurvivesRedisLosingKeys(t *testing.T) {
	cfg := testConfig(t)
	in := start(t, cfg)
	token := in.login(t, "admin", "admin-password")
	c := in.client(t, token)
	if r := c.do("POST", "/api/v1/auth/logout", nil); r.Status != http.StatusNoContent {
		t.Fatalf("logout: %d %s", r.Status, r.Body)
	}
	rdb := testenv.Redis(t)
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, cfg.RedisPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if r := c.do("GET", "/api/v1/me", nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("logged-out token after Redis lost its keys: %d %s, want 401", r.Status, r.Body)
	}
}

// privateRedis runs a redis-server of the test's own on a free loopback
// port with args (the shared test Redis's settings are not the test's to
// change) and returns its URL.
func privateRedis(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skipf("redis-server not installed: %v; run scripts/services.sh start redis", err)
	}
	port := strconv.Itoa(testenv.FreePort(t))
	cmd := exec.Command(bin, append([]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", t.TempDir()}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := "redis://127.0.0.1:" + port + "/0"
	opt, _ := redis.ParseURL(url)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	testenv.Eventually(t, 10*time.Second, "the private redis-server to answer", func() bool {
		return rdb.Ping(context.Background()).Err() == nil
	})
	return url
}

// A Redis that may evict keys is refused at start, unless the operator says
// so (then it starts with an error in the log); a Redis that forbids CONFIG
// cannot be checked and is trusted.
func TestRedisEvictionPolicyCheckedAtStart(t *testing.T) {
	base := testConfig(t)
	base.WorkerID = 3
	ctx := context.Background()

	lru := base
	lru.RedisURL = privateRedis(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	_, err := newApp(ctx, lru, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "noeviction") || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Fatalf("start on an allkeys-lru Redis: %v, want refused naming the policy and noeviction", err)
	}
	lru.RedisAllowEviction = true
	start(t, lru).adminClient(t)

	noConfig := base
	noConfig.RedisURL = privateRedis(t, "--rename-command", "CONFIG", "")
	start(t, noConfig).adminClient(t)

	fine := base
	fine.RedisURL = privateRedis(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	start(t, fine).adminClient(t)
}

// One address trying many usernames is stopped by the per-address limit,
// whichever names it tries; other addresses are not.
func TestLoginLimitPerClientAddress(t *testing.T) {
	in, _ := abuseStart(t, func(c *Config) { c.LoginMaxFailuresPerIP = 6 })
	anon := in.client(t, "")
	for i := 0; i < 6; i++ {
		if r := loginFrom(anon, "203.0.113.50", fmt.Sprintf("nobody-%d", i), "guess-guess"); r.Status != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d %s", i, r.Status, r.Body)
		}
	}
	r := loginFrom(anon, "203.0.113.50", "fresh-name", "guess-guess")
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a 7th username from the address: %d %s (Retry-After %q), want 429 with Retry-After", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
	if r := loginFrom(anon, "203.0.113.51", "admin", "admin-password"); r.Status != http.StatusOK {
		t.Fatalf("another address: %d %s", r.Status, r.Body)
	}
}

// Failed sign-ins older than RAGENT_AUDIT_LOGIN_RETENTION are pruned; every
// other event stays, and the table still refuses to delete anything else,
// or a failed sign-in less than a day old.
func TestFailedLoginAuditRetention(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()
	// Migrate first, then plant old rows as if written 40 days ago.
	first := start(t, cfg)
	first.stop()
	conn := connectDB(t, cfg.DatabaseURL)
	plant := func(id int, action, result string, age string) {
		t.Helper()
		_, err := conn.Exec(ctx, `INSERT INTO audit_events (id, at, action, target_id, result) VALUES ($1, now() - $2::interval, $3, 'x', $4)`,
			id, age, action, result)
		if err != nil {
			t.Fatal(err)
		}
	}
	plant(1, "auth.login", "denied", "40 days")
	plant(2, "auth.login", "locked", "40 days")
	plant(3, "auth.login", "success", "40 days")
	plant(4, "user.create", "denied", "40 days")
	plant(5, "auth.login", "denied", "2 hours")
	cfg.AuditLoginRetention = 30 * 24 * time.Hour
	start(t, cfg)
	remaining := func() map[int]bool {
		rows, err := conn.Query(ctx, `SELECT id FROM audit_events WHERE id <= 5`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		ids := map[int]bool{}
		for rows.Next() {
			var id int
			rows.Scan(&id)
			ids[id] = true
		}
		return ids
	}
	testenv.Eventually(t, 30*time.Second, "the failed sign-ins past retention to be pruned", func() bool {
		ids := remaining()
		return !ids[1] && !ids[2]
	})
	if ids := remaining(); !ids[3] || !ids[4] || !ids[5] {
		t.Fatalf("remaining planted events %v, want 3 (a success), 4 (another action) and 5 (within retention)", ids)
	}
	for _, sql := range []string{`DELETE FROM audit_events WHERE id = 5`, `DELETE FROM audit_events WHERE id = 4`, `UPDATE audit_events SET result = 'success' WHERE id = 5`} {
		if _, err := conn.Exec(ctx, sql); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused as append-only", sql, err)
		}
	}
}

// 25 wrong passwords for the admin from 25 addresses lock the account for
// every client without a device cookie, but the admin's browser, which
// signed in before, still gets in.
func TestDeviceCookieKeepsOwnerIn(t *testing.T) {
	in, _ := abuseStart(t, nil)
	anon := in.client(t, "")
	r := loginFrom(anon, "198.51.100.10", "admin", "admin-password")
	var device *http.Cookie
	for _, ck := range (&http.Response{Header: r.Header}).Cookies() {
		if ck.Name == "ragent_device" {
			device = ck
		}
	}
	if r.Status != http.StatusOK || device == nil || !device.HttpOnly || device.Path != "/api/v1/auth/login" || device.SameSite != http.SameSiteStrictMode || device.MaxAge <= 0 {
		t.Fatalf("login: %d, device cookie %+v; want an HttpOnly, SameSite=Strict cookie for the login route", r.Status, device)
	}
	for i := 0; i < 25; i++ {
		loginFrom(anon, fmt.Sprintf("203.0.113.%d", 100+i), "admin", "guess-guess")
	}
	if r := loginFrom(anon, "198.51.100.11", "admin", "admin-password"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("the right password without the device cookie: %d %s, want 429", r.Status, r.Body)
	}
	cookie := "ragent_device=" + device.Value
	if r := loginFrom(anon, "198.51.100.10", "admin", "admin-password", "Cookie", cookie); r.Status != http.StatusOK {
		t.Fatalf("the right password with the device cookie: %d %s, want 200", r.Status, r.Body)
	}
	forged := "ragent_device=" + device.Value[:len(device.Value)-3] + "abc"
	if r := loginFrom(anon, "198.51.100.10", "admin", "admin-password", "Cookie", forged); r.Status != http.StatusTooManyRequests {
		t.Fatalf("an altered device cookie: %d %s, want 429", r.Status, r.Body)
	}
}

// A user flooding refused requests is held to the session rate, and the
// refusals that get through are coalesced: one row at once, one summary row
// when the window ends, instead of one per request.
func TestSessionRateAndCoalescedRefusals(t *testing.T) {
	in, cfg := abuseStart(t, func(c *Config) {
		c.SessionRatePerMinute = 20
		c.AuditCoalesceWindow = 2 * time.Second
	})
	admin := in.adminClient(t)
	userID := in.createUser(t, admin.token, "mallory", "mallory-password", "user")
	mallory := in.client(t, in.login(t, "mallory", "mallory-password"))
	statuses := map[int]int{}
	var retryAfter string
	for i := 0; i < 60; i++ {
		r := mallory.do("POST", "/api/v1/users", map[string]string{"username": fmt.Sprintf("sneaky%d", i), "password": "sneaky-password"})
		statuses[r.Status]++
		if r.Status == http.StatusTooManyRequests {
			retryAfter = r.Header.Get("Retry-After")
		}
	}
	if statuses[http.StatusForbidden] < 1 || statuses[http.StatusForbidden] > 22 || statuses[http.StatusTooManyRequests] < 38 || retryAfter == "" {
		t.Fatalf("statuses %v (Retry-After %q): want about 20 × 403 and the rest 429 with Retry-After", statuses, retryAfter)
	}
	refused := statuses[http.StatusForbidden]
	// Polled in the database: the admin's requests count against their own
	// session rate too.
	conn := connectDB(t, cfg.DatabaseURL)
	testenv.Eventually(t, 30*time.Second, "the coalesced refusals' summary row", func() bool {
		return countRows(t, conn, `SELECT count(*) FROM audit_events WHERE action = 'user.create' AND actor_user_id = $1`, userID) == 2 || refused == 1
	})
	events := auditEvents(t, admin, "action=user.create&actor="+userID)
	if len(events) != min(refused, 2) {
		t.Fatalf("%d events for %d refusals: %+v", len(events), refused, events)
	}
	if refused > 1 {
		summary := events[0] // newest first
		want := fmt.Sprintf("%d more like this", refused-1)
		if summary.Result != "denied" || !strings.Contains(summary.Detail, want) || events[1].Result != "denied" {
			t.Fatalf("events %+v, want the first refusal and a summary %q", events, want)
		}
	}
	// Other users are not held to mallory's rate.
	if r := admin.do("GET", "/api/v1/me", nil); r.Status != http.StatusOK {
		t.Fatalf("admin: %d %s", r.Status, r.Body)
	}
}

// With Redis away, sign-in is still limited, by counters in the instance,
// and still audited.
func TestLoginLimitedDuringRedisOutage(t *testing.T) {
	cfg := testConfig(t)
	proxy, url := testenv.RedisProxyURL(t)
	cfg.RedisURL, cfg.WorkerID = url, 9
	cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	in := start(t, cfg)
	admin := in.adminClient(t)
	in.createUser(t, admin.token, "bob", "bob-password", "user")
	anon := in.client(t, "")

	proxy.Down()
	for i := 0; i < 5; i++ {
		if r := loginFrom(anon, "203.0.113.70", "bob", "guess-guess"); r.Status != http.StatusUnauthorized {
			t.Fatalf("guess %d with Redis down: %d %s", i, r.Status, r.Body)
		}
	}
	if r := loginFrom(anon, "203.0.113.70", "bob", "bob-password"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("after 5 failures with Redis down: %d %s, want 429", r.Status, r.Body)
	}
	if r := loginFrom(anon, "203.0.113.71", "bob", "bob-password"); r.Status != http.StatusOK {
		t.Fatalf("another address with Redis down: %d %s", r.Status, r.Body)
	}
	got := map[string]bool{}
	for _, e := range auditEvents(t, admin, "action=auth.login&target=bob") {
		got[e.Result] = true
	}
	if !got["denied"] || !got["locked"] || !got["success"] {
		t.Fatalf("audited results %v during the outage, want denied, locked and success", got)
	}
	proxy.Up()
}

// Unknown API keys from one address are throttled: past the per-address
// limit every key from there is refused until the window ends; other
// addresses are not.
func TestUnknownAPIKeysThrottledPerAddress(t *testing.T) {
	in, _ := abuseStart(t, func(c *Config) { c.LoginMaxFailuresPerIP = 5 })
	admin := in.adminClient(t)
	key := createKey(t, admin, map[string]any{"name": "bot", "scopes": []string{"read"}})
	withKey := func(k, ip string) response {
		return in.client(t, k).do("GET", "/api/v1/knowledge-bases", nil, "X-Forwarded-For", ip)
	}
	for i := 0; i < 5; i++ {
		if r := withKey(fmt.Sprintf("rk_%043d", i), "203.0.113.80"); r.Status != http.StatusUnauthorized {
			t.Fatalf("unknown key %d: %d %s", i, r.Status, r.Body)
		}
	}
	r := withKey(key.Key, "203.0.113.80")
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a key from the address after 5 unknown ones: %d %s (Retry-After %q), want 429", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
	if r := withKey(key.Key, "203.0.113.81"); r.Status != http.StatusOK {
		t.Fatalf("the key from another address: %d %s", r.Status, r.Body)
	}
	// Sign-in from the address has its own counter.
	if r := loginFrom(in.client(t, ""), "203.0.113.80", "admin", "admin-password"); r.Status != http.StatusOK {
		t.Fatalf("login from the address: %d %s", r.Status, r.Body)
	}
}
