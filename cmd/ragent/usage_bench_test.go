package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// BenchmarkQuotaTTFT measures what quota checks add to a chat's time to
// first token: two instances on one database and Redis, quotas on (the
// caller has a user and a group quota, daily and monthly: four counters in
// the check's one round trip) and off, alternating in one run.
//
//	go test ./cmd/ragent -run '^$' -bench QuotaTTFT -benchtime 300x
func BenchmarkQuotaTTFT(b *testing.B) {
	llm := newFakeLLM(b)
	cfg := chatConfig(b, llm)
	on := start(b, cfg)
	off := cfg
	off.QuotasEnabled = false
	offIn := start(b, off)
	admin := on.login(b, "admin", "admin-password")
	seedKnowledge(b, on, admin)
	c := on.client(b, admin)
	quotaEverything(b, c)

	isMessage := func(l string) bool { return l == "event: message" }
	body := map[string]any{"question": "How do I connect to the VPN?"}
	ctx := context.Background()
	alternate(b, "ms",
		"off", func() (time.Duration, error) {
			return firstEvent(ctx, offIn.url+"/api/v1/chat", admin, body, isMessage)
		},
		"on", func() (time.Duration, error) { return firstEvent(ctx, on.url+"/api/v1/chat", admin, body, isMessage) })
}

// BenchmarkQuotaAdmit isolates the check itself: Quotas.Admit for the same
// caller on an instance with quotas on (a user and a group quota: four
// counters, one pipelined round trip) and on one with them off, alternating.
//
//	go test ./cmd/ragent -run '^$' -bench QuotaAdmit -benchtime 2000x
func BenchmarkQuotaAdmit(b *testing.B) {
	cfg := testConfig(b)
	on := start(b, cfg)
	off := cfg
	off.QuotasEnabled = false
	offIn := start(b, off)
	c := on.adminClient(b)
	meID := quotaEverything(b, c)
	id, err := service.ParseID(meID)
	if err != nil {
		b.Fatal(err)
	}
	p := service.Principal{UserID: id, Username: "admin", Role: service.RoleAdmin}
	ctx := context.Background()
	if err := on.app.quotas.Admit(ctx, p); err != nil { // loads the quotas
		b.Fatal(err)
	}
	admit := func(in *instance) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			t0 := time.Now()
			err := in.app.quotas.Admit(ctx, p)
			return time.Since(t0), err
		}
	}
	alternate(b, "us", "off", admit(offIn), "on", admit(on))
}

// quotaEverything gives c's user a user and a group quota, daily and
// monthly, too large to reach (four counters for each check), and returns
// the user's id.
func quotaEverything(b *testing.B, c *client) string {
	var me struct{ ID string }
	c.do("GET", "/api/v1/me", nil).json(b, &me)
	var g struct{ ID string }
	c.do("POST", "/api/v1/groups", map[string]any{"name": "bench"}).json(b, &g)
	if r := c.do("POST", "/api/v1/groups/"+g.ID+"/members", map[string]any{"userId": me.ID}); r.Status != http.StatusCreated {
		b.Fatalf("add member: %d %s", r.Status, r.Body)
	}
	big := int64(1) << 40
	putQuota(b, c, map[string]any{"subject": "user", "subjectId": me.ID, "dailyTokens": big, "monthlyTokens": big, "dailyRequests": big, "monthlyRequests": big})
	putQuota(b, c, map[string]any{"subject": "group", "subjectId": g.ID, "dailyTokens": big, "monthlyTokens": big, "dailyRequests": big, "monthlyRequests": big})
	return me.ID
}
