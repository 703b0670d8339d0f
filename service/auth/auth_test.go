package auth

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/ragent-go/ragent/service"
)

// testCost is above bcrypt.MinCost, so a comparison at the minimum cost is
// told apart from one at the configured cost.
const testCost = bcrypt.MinCost + 2

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// store keeps users and revoked token ids in memory.
type store struct {
	mu      sync.Mutex
	users   map[service.ID]service.User
	revoked map[string]time.Time
}

func (s *store) SessionUser(ctx context.Context, id service.ID, tokenID string) (*service.User, bool, error) {
	u, err := s.UserByID(ctx, id)
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, revoked := s.revoked[tokenID]
	return u, revoked, nil
}

func (s *store) RevokeToken(_ context.Context, tokenID string, expires time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked[tokenID] = expires
	return nil
}

func (s *store) PruneRevokedTokens(_ context.Context, before time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for id, exp := range s.revoked {
		if exp.Before(before) {
			delete(s.revoked, id)
			n++
		}
	}
	return n, nil
}

func (s *store) CreateUser(_ context.Context, u *service.User) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.users {
		if strings.EqualFold(o.Username, u.Username) {
			return service.ErrConflict
		}
	}
	s.users[u.ID] = *u
	return nil
}

func (s *store) UserByID(_ context.Context, id service.ID) (*service.User, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[id]
	if !ok {
		return nil, service.ErrNotFound
	}
	return &u, nil
}

func (s *store) UserByUsername(_ context.Context, name string) (*service.User, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.users {
		if strings.EqualFold(u.Username, name) {
			return &u, nil
		}
	}
	return nil, service.ErrNotFound
}

func (s *store) ListUsers(context.Context, service.ID, int) ([]*service.User, error) { return nil, nil }
func (s *store) CountUsers(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.users)), nil
}

func (s *store) UpdateUser(_ context.Context, u *service.User, endSessions bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.users[u.ID]
	if !ok {
		return service.ErrNotFound
	}
	old.Role, old.Disabled, old.PasswordHash = u.Role, u.Disabled, u.PasswordHash
	if endSessions {
		old.TokenVersion++
	}
	s.users[u.ID] = old
	u.TokenVersion = old.TokenVersion
	return nil
}

func (s *store) SetPassword(_ context.Context, id service.ID, hash string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[id]
	if !ok || u.Disabled {
		return 0, service.ErrNotFound
	}
	u.PasswordHash = hash
	u.TokenVersion++
	s.users[id] = u
	return u.TokenVersion, nil
}

func (s *store) EndSessions(_ context.Context, id service.ID) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[id]
	if !ok {
		return 0, service.ErrNotFound
	}
	u.TokenVersion++
	s.users[id] = u
	return u.TokenVersion, nil
}

func (s *store) DeleteUser(_ context.Context, id service.ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.users, id)
	return nil
}

// attempts mirrors the Redis counters (cache/lua/login_reserve.lua,
// login_release.lua) in memory, on the test clock; err makes them
// unreachable.
type attempts struct {
	mu       sync.Mutex
	clock    *clock
	counters map[string]*counter
	err      error
}

type counter struct {
	n     int
	until time.Time
}

func (a *attempts) live(key string) *counter {
	c := a.counters[key]
	if c == nil || !a.clock.Now().Before(c.until) {
		return nil
	}
	return c
}

func (a *attempts) Reserve(_ context.Context, counters []Counter, window time.Duration) (time.Duration, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return 0, a.err
	}
	var wait time.Duration
	for _, c := range counters {
		if lc := a.live(c.Group + c.Name); lc != nil && lc.n >= c.Limit {
			wait = max(wait, lc.until.Sub(a.clock.Now()))
		}
	}
	if wait > 0 {
		return wait, nil
	}
	for _, c := range counters {
		lc := a.live(c.Group + c.Name)
		if lc == nil {
			lc = &counter{until: a.clock.Now().Add(window)}
			a.counters[c.Group+c.Name] = lc
		}
		lc.n++
	}
	return 0, nil
}

func (a *attempts) Release(_ context.Context, counters []Counter) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	for _, c := range counters {
		lc := a.live(c.Group + c.Name)
		switch {
		case lc == nil:
		case c.Clear || lc.n <= 1:
			delete(a.counters, c.Group+c.Name)
		default:
			lc.n--
		}
	}
	return nil
}

type ids struct {
	mu   sync.Mutex
	next service.ID
}

func (g *ids) NextID() (service.ID, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.next++
	return g.next, nil
}

// env is a Service on fakes with an admin and a user.
type env struct {
	svc      *Service
	clock    *clock
	store    *store
	attempts *attempts
	admin    service.Principal
	userID   service.ID
	compares []int // bcrypt cost of every password comparison
	audit    *auditLog
}

// auditLog keeps recorded events; its transactions run fn directly (the
// real ones are tested against Postgres in cmd/ragent).
type auditLog struct{ events []service.AuditEvent }

func (a *auditLog) InTx(ctx context.Context, fn func(ctx context.Context) error) error {
	return fn(ctx)
}

func (a *auditLog) AppendAudit(_ context.Context, e *service.AuditEvent) error {
	a.events = append(a.events, *e)
	return nil
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	clk := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	e := &env{
		clock:    clk,
		store:    &store{users: map[service.ID]service.User{}, revoked: map[string]time.Time{}},
		attempts: &attempts{clock: clk, counters: map[string]*counter{}},
		audit:    &auditLog{},
	}
	cfg.Secret = []byte(strings.Repeat("s", 32))
	cfg.BcryptCost = testCost
	cfg.Now = clk.Now
	svc, err := New(e.store, e.attempts, &ids{}, service.NewAuditor(e.audit, e.audit, &ids{}, service.AuditorConfig{Now: clk.Now}), cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc.compare = func(hash, password []byte) error {
		cost, err := bcrypt.Cost(hash)
		if err != nil {
			t.Fatalf("compared against a hash that is not bcrypt: %v", err)
		}
		e.compares = append(e.compares, cost)
		return bcrypt.CompareHashAndPassword(hash, password)
	}
	e.svc = svc
	ctx := context.Background()
	if _, _, err := svc.Bootstrap(ctx, "admin", "admin-password"); err != nil {
		t.Fatal(err)
	}
	sess, err := svc.Login(ctx, Credentials{Username: "admin", Password: "admin-password"}, "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if e.admin, err = svc.Authenticate(ctx, sess.Token); err != nil {
		t.Fatal(err)
	}
	name, pw := "bob", "bob-password"
	u, err := svc.CreateUser(ctx, e.admin, UserInput{Username: &name, Password: &pw})
	if err != nil {
		t.Fatal(err)
	}
	e.userID = u.ID
	e.compares = nil
	return e
}

// kind names the sentinel err wraps, for compact test tables.
func kind(err error) string {
	for _, k := range []error{service.ErrInvalid, service.ErrUnauthenticated, service.ErrForbidden, service.ErrNotFound, service.ErrConflict, service.ErrBusy} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return "ok"
}

func TestLoginLockout(t *testing.T) {
	type step struct {
		wait     time.Duration // advance the clock first
		password string
		ip       string
		want     string
	}
	wrong := func(ip string, n int) []step {
		s := make([]step, n)
		for i := range s {
			s[i] = step{password: "wrong-password", ip: ip, want: "unauthenticated"}
		}
		return s
	}
	join := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	const a, b = "198.51.100.1", "198.51.100.2"
	tests := []struct {
		name     string
		cfg      Config
		steps    []step
		countErr error
	}{
		{"per address limit pauses that address", Config{}, join(wrong(a, 5), []step{
			{password: "bob-password", ip: a, want: "busy"},
			{password: "bob-password", ip: b, want: "ok"},
		}), nil},
		{"pause ends with the window", Config{FailWindow: time.Minute}, join(wrong(a, 5), []step{
			{wait: 59 * time.Second, password: "bob-password", ip: a, want: "busy"},
			{wait: time.Second, password: "bob-password", ip: a, want: "ok"},
		}), nil},
		{"success clears the address counter", Config{}, join(wrong(a, 4), []step{{password: "bob-password", ip: a, want: "ok"}}, wrong(a, 4), []step{
			{password: "bob-password", ip: a, want: "ok"},
		}), nil},
		{"per username limit spans addresses", Config{MaxFailures: 3, MaxUserFailures: 7}, join(wrong(a, 3), wrong(b, 3), wrong("203.0.113.9", 1), []step{
			{password: "bob-password", ip: "203.0.113.10", want: "busy"},
			{wait: 15 * time.Minute, password: "bob-password", ip: "203.0.113.10", want: "ok"},
		}), nil},
		{"success does not clear other addresses' failures", Config{MaxFailures: 5, MaxUserFailures: 6}, join(wrong(a, 5), []step{{password: "bob-password", ip: b, want: "ok"}}, wrong(b, 1), []step{
			{password: "bob-password", ip: b, want: "busy"},
		}), nil},
		{"counters unreachable: counted in this instance", Config{}, join(wrong(a, 5), []step{
			{password: "bob-password", ip: a, want: "busy"},
			{password: "bob-password", ip: b, want: "ok"},
		}), errors.New("redis down")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.cfg)
			e.attempts.err = tt.countErr
			for i, s := range tt.steps {
				e.clock.Add(s.wait)
				before := len(e.audit.events)
				_, err := e.svc.Login(context.Background(), Credentials{Username: "BOB", Password: s.password}, s.ip)
				if got := kind(err); got != s.want {
					t.Fatalf("step %d (%s from %s): %s, want %s", i, s.password, s.ip, got, s.want)
				}
				// Each attempt is one audit event: a success, a failure or a lockout.
				wantResult := map[string]service.AuditResult{"ok": service.AuditSuccess, "unauthenticated": service.AuditDenied, "busy": service.AuditLocked}[s.want]
				if got := e.audit.events[before:]; len(got) != 1 || got[0].Action != service.AuditLogin || got[0].Result != wantResult || got[0].TargetID != "BOB" {
					t.Fatalf("step %d: audit events %+v, want one %s login of BOB", i, got, wantResult)
				}
				var de *service.Error
				if errors.Is(err, service.ErrBusy) && (!errors.As(err, &de) || de.Details["retryAfter"] == "") {
					t.Fatalf("step %d: busy without retryAfter: %#v", i, err)
				}
			}
		})
	}
}

func TestLoginRetryAfterIsTheRestOfTheWindow(t *testing.T) {
	e := newEnv(t, Config{FailWindow: 10 * time.Minute})
	for i := 0; i < 5; i++ {
		e.svc.Login(context.Background(), Credentials{Username: "bob", Password: "wrong-password"}, "198.51.100.1")
	}
	e.clock.Add(4*time.Minute + 500*time.Millisecond)
	_, err := e.svc.Login(context.Background(), Credentials{Username: "bob", Password: "bob-password"}, "198.51.100.1")
	var de *service.Error
	if !errors.As(err, &de) || de.Details["retryAfter"] != "360" { // 5m59.5s rounded up
		t.Fatalf("err %v, want busy with retryAfter 360", err)
	}
}

// Every login path compares the password exactly once, against a hash of
// the configured cost, so timing tells nothing about the username.
func TestLoginComparesOnceAtConfiguredCost(t *testing.T) {
	tests := []struct {
		name     string
		username string
		password string
		disable  bool
		want     string
	}{
		{"unknown user", "nobody", "whatever-pw", false, "unauthenticated"},
		{"wrong password", "bob", "wrong-password", false, "unauthenticated"},
		{"disabled user, right password", "bob", "bob-password", true, "unauthenticated"},
		{"disabled user, wrong password", "bob", "wrong-password", true, "unauthenticated"},
		{"right password", "bob", "bob-password", false, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			if tt.disable {
				d := true
				if _, err := e.svc.UpdateUser(context.Background(), e.admin, e.userID, UserInput{Disabled: &d}); err != nil {
					t.Fatal(err)
				}
			}
			e.compares = nil
			_, err := e.svc.Login(context.Background(), Credentials{Username: tt.username, Password: tt.password}, "198.51.100.1")
			if got := kind(err); got != tt.want {
				t.Fatalf("login: %s, want %s", got, tt.want)
			}
			if len(e.compares) != 1 || e.compares[0] != testCost {
				t.Fatalf("comparisons at costs %v, want exactly one at cost %d", e.compares, testCost)
			}
		})
	}
}

func TestTokenVersion(t *testing.T) {
	ctx := context.Background()
	yes, no := true, false
	admin, user := service.RoleAdmin, service.RoleUser
	newPassword := "new-password"
	// update has the admin apply each change to bob in turn.
	update := func(changes ...UserInput) func(e *env, _ service.Principal) error {
		return func(e *env, _ service.Principal) error {
			for _, in := range changes {
				if _, err := e.svc.UpdateUser(ctx, e.admin, e.userID, in); err != nil {
					return err
				}
			}
			return nil
		}
	}
	tests := []struct {
		name string
		// act changes something; the old token's fate is want.
		act  func(e *env, p service.Principal) error
		want string
	}{
		{"nothing", func(*env, service.Principal) error { return nil }, "ok"},
		{"own password change", func(e *env, p service.Principal) error {
			_, err := e.svc.ChangePassword(ctx, p, PasswordChange{OldPassword: "bob-password", NewPassword: newPassword}, "198.51.100.1")
			return err
		}, "unauthenticated"},
		{"admin sets password", update(UserInput{Password: &newPassword}), "unauthenticated"},
		{"disable then enable", update(UserInput{Disabled: &yes}, UserInput{Disabled: &no}), "unauthenticated"},
		{"role change", update(UserInput{Role: &admin}), "unauthenticated"},
		{"same role and enabled again", update(UserInput{Role: &user, Disabled: &no}), "ok"},
		{"log out everywhere", func(e *env, p service.Principal) error { return e.svc.LogoutEverywhere(ctx, p) }, "unauthenticated"},
		{"another user logs out everywhere", func(e *env, _ service.Principal) error { return e.svc.LogoutEverywhere(ctx, e.admin) }, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			sess, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password"}, "198.51.100.1")
			if err != nil {
				t.Fatal(err)
			}
			p, err := e.svc.Authenticate(ctx, sess.Token)
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.act(e, p); err != nil {
				t.Fatalf("act: %v", err)
			}
			if _, err := e.svc.Authenticate(ctx, sess.Token); kind(err) != tt.want {
				t.Fatalf("old token: %s, want %s", kind(err), tt.want)
			}
			// Whatever happened, signing in again gives a working token.
			pw := "bob-password"
			if _, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: pw}, "198.51.100.2"); err != nil {
				pw = newPassword
			}
			fresh, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: pw}, "198.51.100.2")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.svc.Authenticate(ctx, fresh.Token); err != nil {
				t.Fatalf("fresh token: %v", err)
			}
		})
	}
}

func TestChangePassword(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		in    PasswordChange
		want  string
		field string
	}{
		{"ok", PasswordChange{OldPassword: "bob-password", NewPassword: "bob-password-2"}, "ok", ""},
		{"wrong old password", PasswordChange{OldPassword: "not-it", NewPassword: "bob-password-2"}, "invalid", "oldPassword"},
		{"no old password", PasswordChange{NewPassword: "bob-password-2"}, "invalid", "oldPassword"},
		{"too short", PasswordChange{OldPassword: "bob-password", NewPassword: "short"}, "invalid", ""},
		{"unchanged", PasswordChange{OldPassword: "bob-password", NewPassword: "bob-password"}, "invalid", "newPassword"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			sess, _ := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password"}, "198.51.100.1")
			p, _ := e.svc.Authenticate(ctx, sess.Token)
			got, err := e.svc.ChangePassword(ctx, p, tt.in, "198.51.100.1")
			if kind(err) != tt.want {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
			var de *service.Error
			if tt.field != "" && (!errors.As(err, &de) || de.Details["field"] != tt.field) {
				t.Fatalf("error %#v does not name field %s", err, tt.field)
			}
			if err != nil {
				if _, err := e.svc.Authenticate(ctx, sess.Token); err != nil {
					t.Fatalf("a refused change ended the session: %v", err)
				}
				return
			}
			if _, err := e.svc.Authenticate(ctx, got.Token); err != nil {
				t.Fatalf("the new session: %v", err)
			}
			if _, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: tt.in.NewPassword}, "198.51.100.1"); err != nil {
				t.Fatalf("login with the new password: %v", err)
			}
		})
	}

	t.Run("wrong old passwords count against the login limit", func(t *testing.T) {
		e := newEnv(t, Config{})
		sess, _ := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password"}, "198.51.100.1")
		p, _ := e.svc.Authenticate(ctx, sess.Token)
		for i := 0; i < 5; i++ {
			e.svc.ChangePassword(ctx, p, PasswordChange{OldPassword: "guess", NewPassword: "bob-password-2"}, "198.51.100.1")
		}
		if _, err := e.svc.ChangePassword(ctx, p, PasswordChange{OldPassword: "bob-password", NewPassword: "bob-password-2"}, "198.51.100.1"); kind(err) != "busy" {
			t.Fatalf("change after 5 wrong passwords: %v, want busy", err)
		}
		if _, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password"}, "198.51.100.1"); kind(err) != "busy" {
			t.Fatalf("login after 5 wrong passwords: %v, want busy", err)
		}
	})
}

func TestTokenExpiryAndRevocation(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		prepare func(e *env, p service.Principal)
		want    string
	}{
		{"fresh", func(*env, service.Principal) {}, "ok"},
		{"just before expiry", func(e *env, _ service.Principal) { e.clock.Add(time.Hour - time.Second) }, "ok"},
		{"expired", func(e *env, _ service.Principal) { e.clock.Add(time.Hour + time.Second) }, "unauthenticated"},
		{"logged out", func(e *env, p service.Principal) { e.svc.Logout(ctx, p) }, "unauthenticated"},
		{"user deleted", func(e *env, p service.Principal) { e.store.DeleteUser(ctx, p.UserID) }, "unauthenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{TokenTTL: time.Hour})
			sess, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password"}, "198.51.100.1")
			if err != nil {
				t.Fatal(err)
			}
			if want := e.clock.Now().Add(time.Hour); !sess.Expires.Equal(want) {
				t.Fatalf("expires %v, want %v", sess.Expires, want)
			}
			p, err := e.svc.Authenticate(ctx, sess.Token)
			if err != nil {
				t.Fatal(err)
			}
			tt.prepare(e, p)
			if _, err := e.svc.Authenticate(ctx, sess.Token); kind(err) != tt.want {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
		})
	}
}

func TestNewRejectsLimitsBelowEachOther(t *testing.T) {
	log := &auditLog{}
	_, err := New(&store{}, &attempts{}, &ids{}, service.NewAuditor(log, log, &ids{}, service.AuditorConfig{}), Config{Secret: []byte(strings.Repeat("s", 32)), MaxFailures: 10, MaxUserFailures: 5})
	if err == nil {
		t.Fatal("a per-username limit below the per-address one was accepted")
	}
}

// Only tokens this service signed, unexpired, for a live user at the
// current token version get through; everything else is unauthenticated.
func TestAuthenticateRejectsForgedTokens(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{TokenTTL: time.Hour})
	valid := func() claims {
		now := e.clock.Now()
		return claims{Role: string(service.RoleAdmin), RegisteredClaims: jwt.RegisteredClaims{
			Subject: e.userID.String(), ID: "forged", Issuer: "ragent",
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)),
		}}
	}
	sign := func(c claims, method jwt.SigningMethod, key any) string {
		tok, err := jwt.NewWithClaims(method, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	secret := []byte(strings.Repeat("s", 32))
	tests := []struct {
		name  string
		token func() string
		want  string
	}{
		{"signed with the secret", func() string { return sign(valid(), jwt.SigningMethodHS256, secret) }, "ok"},
		{"another secret", func() string { return sign(valid(), jwt.SigningMethodHS256, []byte(strings.Repeat("x", 32))) }, "unauthenticated"},
		{"alg none", func() string { return sign(valid(), jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType) }, "unauthenticated"},
		{"HS512", func() string { return sign(valid(), jwt.SigningMethodHS512, secret) }, "unauthenticated"},
		{"another issuer", func() string { c := valid(); c.Issuer = "evil"; return sign(c, jwt.SigningMethodHS256, secret) }, "unauthenticated"},
		{"no expiry", func() string { c := valid(); c.ExpiresAt = nil; return sign(c, jwt.SigningMethodHS256, secret) }, "unauthenticated"},
		{"expired", func() string {
			c := valid()
			c.ExpiresAt = jwt.NewNumericDate(e.clock.Now().Add(-time.Second))
			return sign(c, jwt.SigningMethodHS256, secret)
		}, "unauthenticated"},
		{"older token version", func() string { c := valid(); c.Version = -1; return sign(c, jwt.SigningMethodHS256, secret) }, "unauthenticated"},
		{"unknown user", func() string { c := valid(); c.Subject = "999999"; return sign(c, jwt.SigningMethodHS256, secret) }, "unauthenticated"},
		{"not an id", func() string { c := valid(); c.Subject = "bob"; return sign(c, jwt.SigningMethodHS256, secret) }, "unauthenticated"},
		{"payload altered", func() string {
			h, _, _ := strings.Cut(sign(valid(), jwt.SigningMethodHS256, secret), ".")
			other := strings.Split(sign(valid(), jwt.SigningMethodHS256, []byte(strings.Repeat("x", 32))), ".")
			return h + "." + other[1] + "." + other[2]
		}, "unauthenticated"},
		{"garbage", func() string { return "not.a.token" }, "unauthenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := e.svc.Authenticate(ctx, tt.token())
			if kind(err) != tt.want {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
			// The role comes from the user row, never from the token.
			if err == nil && p.Role != service.RoleUser {
				t.Fatalf("role %q taken from the token, want the stored %q", p.Role, service.RoleUser)
			}
		})
	}
}
