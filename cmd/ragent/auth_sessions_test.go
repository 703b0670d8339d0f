package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/cache"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/auth"
)

// twoInstances starts two instances on one database and Redis, signs the
// admin in and creates bob.
func twoInstances(t *testing.T) (ins [2]*instance, admin, bobID string) {
	t.Helper()
	cfg := testConfig(t)
	ins[0] = start(t, cfg)
	ins[1] = start(t, cfg)
	admin = ins[0].login(t, "admin", "admin-password")
	bobID = ins[0].createUser(t, admin, "bob", "bob-password", "user")
	return ins, admin, bobID
}

// wantStatus checks GET /me with token on every instance.
func wantStatus(t *testing.T, ins [2]*instance, token string, status int) {
	t.Helper()
	for i, in := range ins {
		if r := in.client(t, token).do("GET", "/api/v1/me", nil); r.Status != status {
			t.Fatalf("GET /me on instance %d: %d %s, want %d", i, r.Status, r.Body, status)
		}
	}
}

func TestChangeOwnPassword(t *testing.T) {
	ins, admin, bobID := twoInstances(t)
	phone := ins[0].login(t, "bob", "bob-password")
	laptop := ins[1].login(t, "bob", "bob-password")
	bob := ins[0].client(t, phone)

	tests := []struct {
		name   string
		body   any
		status int
		code   string
		field  string
	}{
		{"wrong old password", map[string]string{"oldPassword": "not-bobs", "newPassword": "bob-new-password"}, http.StatusBadRequest, "invalid", "oldPassword"},
		{"missing old password", map[string]string{"newPassword": "bob-new-password"}, http.StatusBadRequest, "invalid", "oldPassword"},
		{"short new password", map[string]string{"oldPassword": "bob-password", "newPassword": "short"}, http.StatusBadRequest, "invalid", ""},
		{"same password", map[string]string{"oldPassword": "bob-password", "newPassword": "bob-password"}, http.StatusBadRequest, "invalid", "newPassword"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bob.forTest(t).do("POST", "/api/v1/me/password", tt.body)
			var e struct {
				Error struct {
					Code    string
					Details map[string]string
				}
			}
			r.json(t, &e)
			if r.Status != tt.status || e.Error.Code != tt.code || e.Error.Details["field"] != tt.field {
				t.Fatalf("got %d %s, want %d %s (field %q)", r.Status, r.Body, tt.status, tt.code, tt.field)
			}
			// A refused change ends nothing.
			wantStatus(t, ins, phone, http.StatusOK)
		})
	}

	r := bob.do("POST", "/api/v1/me/password", map[string]string{"oldPassword": "bob-password", "newPassword": "bob-new-password"})
	if r.Status != http.StatusOK {
		t.Fatalf("change password: %d %s", r.Status, r.Body)
	}
	if ck := r.Header.Get("Set-Cookie"); !strings.Contains(ck, "ragent_session=ey") {
		t.Fatalf("change password sets no new session cookie: %q", ck)
	}
	var sess struct{ Token string }
	r.json(t, &sess)

	// Every token issued before the change is refused on every instance;
	// the one the change answered with works.
	wantStatus(t, ins, phone, http.StatusUnauthorized)
	wantStatus(t, ins, laptop, http.StatusUnauthorized)
	wantStatus(t, ins, sess.Token, http.StatusOK)
	if r := ins[1].client(t, "").do("POST", "/api/v1/auth/login", map[string]string{"username": "bob", "password": "bob-password"}); r.Status != http.StatusUnauthorized {
		t.Fatalf("login with the old password: %d, want 401", r.Status)
	}
	fresh := ins[1].login(t, "bob", "bob-new-password")

	// A password an admin sets ends the user's sessions too.
	if r := ins[0].client(t, admin).do("PATCH", "/api/v1/users/"+bobID, map[string]any{"password": "set-by-admin"}); r.Status != http.StatusOK {
		t.Fatalf("admin sets password: %d %s", r.Status, r.Body)
	}
	wantStatus(t, ins, sess.Token, http.StatusUnauthorized)
	wantStatus(t, ins, fresh, http.StatusUnauthorized)
}

// Wrong current passwords count against the login limit, so the password
// change is no way around it.
func TestChangePasswordIsLimited(t *testing.T) {
	ins, _, _ := twoInstances(t)
	bob := ins[0].client(t, ins[0].login(t, "bob", "bob-password"))
	for i := 0; i < 5; i++ {
		if r := bob.do("POST", "/api/v1/me/password", map[string]string{"oldPassword": fmt.Sprintf("guess-%d", i), "newPassword": "bob-new-password"}); r.Status != http.StatusBadRequest {
			t.Fatalf("guess %d: %d %s, want 400", i, r.Status, r.Body)
		}
	}
	r := bob.do("POST", "/api/v1/me/password", map[string]string{"oldPassword": "bob-password", "newPassword": "bob-new-password"})
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("after 5 wrong passwords: %d %s (Retry-After %q), want 429 with Retry-After", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
	if r := ins[1].client(t, "").do("POST", "/api/v1/auth/login", map[string]string{"username": "bob", "password": "bob-password"}); r.Status != http.StatusTooManyRequests {
		t.Fatalf("login after 5 wrong passwords on the change form: %d, want 429", r.Status)
	}
}

func TestAdminChangesEndSessions(t *testing.T) {
	ins, admin, bobID := twoInstances(t)
	adm := ins[0].client(t, admin)
	patch := func(t *testing.T, body map[string]any) {
		t.Helper()
		if r := adm.do("PATCH", "/api/v1/users/"+bobID, body); r.Status != http.StatusOK {
			t.Fatalf("PATCH %v: %d %s", body, r.Status, r.Body)
		}
	}

	t.Run("disable then enable", func(t *testing.T) {
		token := ins[1].login(t, "bob", "bob-password")
		patch(t, map[string]any{"disabled": true})
		wantStatus(t, ins, token, http.StatusUnauthorized)
		patch(t, map[string]any{"disabled": false})
		wantStatus(t, ins, token, http.StatusUnauthorized)
		wantStatus(t, ins, ins[1].login(t, "bob", "bob-password"), http.StatusOK)
	})

	t.Run("role change", func(t *testing.T) {
		token := ins[1].login(t, "bob", "bob-password")
		patch(t, map[string]any{"role": "admin"})
		wantStatus(t, ins, token, http.StatusUnauthorized)
		token = ins[1].login(t, "bob", "bob-password")
		patch(t, map[string]any{"role": "user"})
		wantStatus(t, ins, token, http.StatusUnauthorized)
	})

	t.Run("unchanged role keeps sessions", func(t *testing.T) {
		token := ins[1].login(t, "bob", "bob-password")
		patch(t, map[string]any{"role": "user", "disabled": false})
		wantStatus(t, ins, token, http.StatusOK)
	})
}

func TestLogoutEverywhere(t *testing.T) {
	ins, admin, _ := twoInstances(t)
	phone := ins[0].login(t, "bob", "bob-password")
	laptop := ins[1].login(t, "bob", "bob-password")
	ins[0].createUser(t, admin, "carol", "carol-password", "user")
	carol := ins[0].login(t, "carol", "carol-password")

	r := ins[1].client(t, laptop).do("POST", "/api/v1/auth/logout-all", nil)
	if r.Status != http.StatusNoContent {
		t.Fatalf("logout-all: %d %s", r.Status, r.Body)
	}
	if ck := r.Header.Get("Set-Cookie"); !strings.Contains(ck, "ragent_session=;") {
		t.Fatalf("logout-all keeps the cookie: %q", ck)
	}
	wantStatus(t, ins, phone, http.StatusUnauthorized)
	wantStatus(t, ins, laptop, http.StatusUnauthorized)
	wantStatus(t, ins, carol, http.StatusOK)
	wantStatus(t, ins, admin, http.StatusOK)
	wantStatus(t, ins, ins[0].login(t, "bob", "bob-password"), http.StatusOK)
}

// Guesses at one account from many addresses stop at the per-username
// limit. The client address is an argument of the service's Login, so the
// test calls it directly, with the instance's Postgres store and Redis.
func TestLoginLimitPerUsername(t *testing.T) {
	cfg := testConfig(t)
	cfg.LoginMaxFailuresPerUser = 8
	in := start(t, cfg)
	admin := in.login(t, "admin", "admin-password")
	in.createUser(t, admin, "erin", "erin-password", "user")
	in.createUser(t, admin, "fred", "fred-password", "user")

	state := cache.NewAuthState(in.app.rdb, cfg.RedisPrefix)
	svc, err := auth.New(in.app.store, loginAttempts{state}, nil, service.NewAuditor(in.app.store, in.app.store, idSource{in.app.ids}, service.AuditorConfig{}), authConfig(cfg, []byte(strings.Repeat("k", 32)), nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var unauthenticated, busy int
	for i := 0; i < 20; i++ {
		ip := fmt.Sprintf("203.0.113.%d", i+1) // one guess per address: the per-address limit never trips
		_, err := svc.Login(ctx, auth.Credentials{Username: "erin", Password: "guess-guess"}, ip)
		switch {
		case errors.Is(err, service.ErrUnauthenticated):
			unauthenticated++
		case errors.Is(err, service.ErrBusy):
			busy++
		default:
			t.Fatalf("guess from %s: %v", ip, err)
		}
	}
	if unauthenticated != 8 || busy != 12 {
		t.Fatalf("%d guesses checked and %d refused, want 8 and 12", unauthenticated, busy)
	}
	if _, err := svc.Login(ctx, auth.Credentials{Username: "ERIN", Password: "erin-password"}, "198.51.100.1"); !errors.Is(err, service.ErrBusy) {
		t.Fatalf("right password from a fresh address during the pause: %v, want busy", err)
	}
	if _, err := svc.Login(ctx, auth.Credentials{Username: "fred", Password: "fred-password"}, "203.0.113.1"); err != nil {
		t.Fatalf("another account from a guessing address: %v", err)
	}

	// Over HTTP the pause is a 429 whose Retry-After is the rest of the window.
	r := in.client(t, "").do("POST", "/api/v1/auth/login", map[string]string{"username": "erin", "password": "erin-password"})
	secs, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.Status != http.StatusTooManyRequests || secs < 1 || secs > int(cfg.LoginFailWindow/time.Second) {
		t.Fatalf("login during the pause: %d, Retry-After %q; want 429 and 1..%d", r.Status, r.Header.Get("Retry-After"), int(cfg.LoginFailWindow/time.Second))
	}
}
