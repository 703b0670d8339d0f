package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Input longer than any stored username or password is refused before it
// is counted, compared or looked up, and the audit row keeps a bounded
// target.
func TestLoginInputBounds(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name, username, password, field string
	}{
		{"long username", strings.Repeat("x", 65), "whatever-pw", "username"},
		{"megabyte username", strings.Repeat("é", 1<<19), "whatever-pw", "username"},
		{"control character", "bob\x1b[31m", "whatever-pw", "username"},
		{"long password", "bob", strings.Repeat("p", 73), "password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			before := len(e.audit.events)
			_, err := e.svc.Login(ctx, Credentials{Username: tt.username, Password: tt.password}, "198.51.100.1")
			var de *service.Error
			if kind(err) != "invalid" || !errors.As(err, &de) || de.Details["field"] != tt.field {
				t.Fatalf("got %v, want invalid naming %s", err, tt.field)
			}
			if len(e.compares) != 0 || len(e.attempts.counters) != 0 {
				t.Fatalf("%d comparisons and %d counters for refused input", len(e.compares), len(e.attempts.counters))
			}
			got := e.audit.events[before:]
			if len(got) != 1 || got[0].Result != service.AuditInvalid || len([]rune(got[0].TargetID)) > 128 {
				t.Fatalf("audit events %+v, want one invalid login with a target of at most 128 characters", got)
			}
		})
	}
	t.Run("counter keys do not grow with the username", func(t *testing.T) {
		e := newEnv(t, Config{})
		name := strings.Repeat("x", 64)
		e.svc.Login(ctx, Credentials{Username: name, Password: "whatever-pw"}, "2001:db8::1")
		for k := range e.attempts.counters {
			if strings.Contains(k, name) || len(k) > 100 {
				t.Fatalf("counter %q holds the username", k)
			}
		}
	})
}

// One address guessing many usernames stops at MaxClientFailures; other
// addresses are not affected, and an IPv6 client's whole /64 is one address.
func TestLoginLimitPerClient(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{MaxClientFailures: 10})
	for i := 0; i < 10; i++ {
		_, err := e.svc.Login(ctx, Credentials{Username: fmt.Sprintf("nobody%d", i), Password: "guess-guess"}, fmt.Sprintf("2001:db8:1:2::%x", i+1))
		if kind(err) != "unauthenticated" {
			t.Fatalf("guess %d: %v", i, err)
		}
	}
	if _, err := e.svc.Login(ctx, Credentials{Username: "fresh-name", Password: "guess-guess"}, "2001:db8:1:2::ffff"); kind(err) != "busy" {
		t.Fatalf("an 11th username from the same /64: %v, want busy", err)
	}
	if _, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password"}, "2001:db8:1:3::1"); err != nil {
		t.Fatalf("another /64: %v", err)
	}
}

// The device cookie: guesses from everywhere lock the account for
// untrusted clients, while a device that signed in before still gets in
// (and has a bucket of its own). A cookie of another user, an altered or an
// expired one counts for nothing.
func TestDeviceCookieSkipsAccountLockout(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{MaxFailures: 3, MaxUserFailures: 6})
	sess, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password"}, "198.51.100.1")
	if err != nil || sess.Device == "" {
		t.Fatalf("login: %v, device cookie %q", err, sess.Device)
	}
	device := sess.Device
	adminDevice, err := e.svc.Login(ctx, Credentials{Username: "admin", Password: "admin-password"}, "198.51.100.1")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ { // an attacker, one guess per address
		e.svc.Login(ctx, Credentials{Username: "bob", Password: "guess-guess"}, fmt.Sprintf("203.0.113.%d", i+1))
	}
	if _, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password"}, "198.51.100.1"); kind(err) != "busy" {
		t.Fatalf("the owner without the cookie: %v, want busy", err)
	}
	tampered := device[:len(device)-2] + "AA"
	for _, c := range []string{adminDevice.Device, tampered, "v1.garbage"} {
		if _, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password", Device: c}, "198.51.100.1"); kind(err) != "busy" {
			t.Fatalf("cookie %q: %v, want busy", c, err)
		}
	}
	next, err := e.svc.Login(ctx, Credentials{Username: "BOB", Password: "bob-password", Device: device}, "198.51.100.1")
	if err != nil {
		t.Fatalf("the owner with the device cookie: %v", err)
	}
	// The device's own bucket: its wrong passwords lock it alone.
	for i := 0; i < 3; i++ {
		e.svc.Login(ctx, Credentials{Username: "bob", Password: "typo-typo", Device: next.Device}, "198.51.100.1")
	}
	if _, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password", Device: next.Device}, "198.51.100.1"); kind(err) != "busy" {
		t.Fatalf("after 3 wrong passwords from the device: %v, want busy", err)
	}
	if _, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password", Device: device}, "198.51.100.1"); err != nil {
		t.Fatalf("another device of the owner: %v", err)
	}
	e.clock.Add(DeviceTTL + time.Second)
	if _, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password", Device: device}, "198.51.100.1"); err != nil {
		// The account's window has long ended too: an expired cookie is an
		// untrusted client, which is no longer locked.
		t.Fatalf("expired cookie after the window: %v", err)
	}
	if _, ok := e.svc.trustedDevice(device, e.userID); ok {
		t.Fatal("an expired device cookie is still trusted")
	}
}

// Unknown keys from one address stop at MaxClientFailures per window, also
// a valid key from there, until the window ends; other addresses go on.
func TestAPIKeyFailuresLimitedPerClient(t *testing.T) {
	a, _, clk := newKeys(t)
	a.LimitFailures(&attempts{clock: clk, counters: map[string]*counter{}}, Config{MaxClientFailures: 3, FailWindow: time.Minute, Now: clk.Now})
	ctx := context.Background()
	created, err := a.Create(ctx, bob, KeyInput{Name: "k", Scopes: []service.Scope{service.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	from := func(ip string) context.Context { return service.WithClientIP(ctx, ip) }
	for i := 0; i < 3; i++ {
		if _, err := a.Authenticate(from("198.51.100.7"), "rk_unknown"); kind(err) != "unauthenticated" {
			t.Fatalf("unknown key %d: %v", i, err)
		}
	}
	if _, err := a.Authenticate(from("198.51.100.7"), created.Key); kind(err) != "busy" {
		t.Fatalf("a good key after 3 failures from its address: %v, want busy", err)
	}
	if _, err := a.Authenticate(from("198.51.100.8"), created.Key); err != nil {
		t.Fatalf("the key from another address: %v", err)
	}
	for i := 0; i < 5; i++ { // successes count nothing
		if _, err := a.Authenticate(from("198.51.100.8"), created.Key); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(time.Minute)
	if _, err := a.Authenticate(from("198.51.100.7"), created.Key); err != nil {
		t.Fatalf("after the window: %v", err)
	}
}
