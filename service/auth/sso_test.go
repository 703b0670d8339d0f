package auth

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// fakeIdP is an identity provider the test scripts: Exchange answers with
// exchange (or exchangeErr) when the code is "good-code" and the verifier
// and nonce are the ones AuthCodeURL was given; Refresh answers with
// refresh (or refreshErr).
type fakeIdP struct {
	mu          sync.Mutex
	issued      map[string][2]string // state → verifier, nonce
	exchange    service.Identity
	exchangeErr error
	refresh     service.Identity
	refreshErr  error
	refreshes   int
	refreshedBy []string // the refresh tokens asked with
}

func (f *fakeIdP) AuthCodeURL(_ context.Context, state, nonce, verifier string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.issued[state] = [2]string{verifier, nonce}
	return "https://idp.example/auth?state=" + url.QueryEscape(state), nil
}

func (f *fakeIdP) Exchange(_ context.Context, code, verifier, nonce string) (*service.Identity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.exchangeErr != nil {
		return nil, f.exchangeErr
	}
	if code != "good-code" {
		return nil, service.Errorf(service.ErrUnauthenticated, "bad code")
	}
	// The verifier and nonce must be a pair this provider handed out.
	for _, vn := range f.issued {
		if vn == [2]string{verifier, nonce} {
			id := f.exchange
			id.Groups = slices.Clone(f.exchange.Groups)
			return &id, nil
		}
	}
	return nil, service.Errorf(service.ErrUnauthenticated, "unknown verifier")
}

func (f *fakeIdP) Refresh(_ context.Context, refreshToken string) (*service.Identity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshes++
	f.refreshedBy = append(f.refreshedBy, refreshToken)
	if f.refreshErr != nil {
		return nil, f.refreshErr
	}
	id := f.refresh
	id.Groups = slices.Clone(f.refresh.Groups)
	return &id, nil
}

func (f *fakeIdP) EndSessionURL(_ context.Context, idToken string) (string, error) {
	return "https://idp.example/logout?id_token_hint=" + idToken, nil
}

// ssoStore is the SSO side of the store in memory, on top of the users of
// store.
type ssoStore struct {
	users    *store
	mu       sync.Mutex
	logins   map[string]service.OIDCLogin
	sessions map[string]service.OIDCSession
	groups   map[service.ID][]string // user → provider-managed group names
}

func (s *ssoStore) UserByIdentity(_ context.Context, issuer, subject string) (*service.User, error) {
	s.users.mu.Lock()
	defer s.users.mu.Unlock()
	for _, u := range s.users.users {
		if u.OIDCIssuer == issuer && u.OIDCSubject == subject {
			return &u, nil
		}
	}
	return nil, service.ErrNotFound
}

func (s *ssoStore) PutOIDCLogin(_ context.Context, l service.OIDCLogin) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logins[l.State] = l
	return nil
}

func (s *ssoStore) TakeOIDCLogin(_ context.Context, state string, now time.Time) (*service.OIDCLogin, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.logins[state]
	delete(s.logins, state)
	if !ok || !l.Expires.After(now) {
		return nil, service.ErrNotFound
	}
	return &l, nil
}

func (s *ssoStore) PutOIDCSession(_ context.Context, o service.OIDCSession) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions[o.TokenID] = o
	return nil
}

func (s *ssoStore) OIDCSession(_ context.Context, tokenID string) (*service.OIDCSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.sessions[tokenID]
	if !ok {
		return nil, service.ErrNotFound
	}
	return &o, nil
}

func (s *ssoStore) ClaimOIDCCheck(_ context.Context, tokenID string, seen, now time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.sessions[tokenID]
	if !ok || !o.CheckedAt.Equal(seen) {
		return false, nil
	}
	o.CheckedAt = now
	s.sessions[tokenID] = o
	return true, nil
}

func (s *ssoStore) SetOIDCCheck(_ context.Context, tokenID string, checked time.Time, refreshToken, idToken string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.sessions[tokenID]
	o.CheckedAt = checked
	if refreshToken != "" {
		o.RefreshToken = refreshToken
		if idToken != "" {
			o.IDToken = idToken
		}
	}
	s.sessions[tokenID] = o
	return nil
}

func (s *ssoStore) DeleteOIDCSession(_ context.Context, tokenID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, tokenID)
	return nil
}

func (s *ssoStore) DeleteUserOIDCSessions(_ context.Context, userID service.ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, o := range s.sessions {
		if o.UserID == userID {
			delete(s.sessions, k)
		}
	}
	return nil
}

func (s *ssoStore) SyncOIDCGroups(_ context.Context, userID service.ID, names []string, _ func() (service.ID, error)) (joined, left []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	have := s.groups[userID]
	for _, n := range names {
		if !slices.Contains(have, n) {
			joined = append(joined, n)
		}
	}
	for _, h := range have {
		if !slices.Contains(names, h) {
			left = append(left, h)
		}
	}
	s.groups[userID] = slices.Clone(names)
	return joined, left, nil
}

func (s *ssoStore) PruneOIDC(context.Context, time.Time) (int64, error) { return 0, nil }

const testIssuer = "https://idp.example/realms/r"

type ssoEnv struct {
	*env
	sso   *SSO
	idp   *fakeIdP
	store *ssoStore
}

func newSSOEnv(t *testing.T, cfg SSOConfig) *ssoEnv {
	t.Helper()
	e := newEnv(t, Config{})
	st := &ssoStore{users: e.store, logins: map[string]service.OIDCLogin{}, sessions: map[string]service.OIDCSession{}, groups: map[service.ID][]string{}}
	idp := &fakeIdP{issued: map[string][2]string{},
		exchange: service.Identity{Issuer: testIssuer, Subject: "sub-1", Username: "carol", RefreshToken: "rt-1", IDToken: "idt-1"}}
	idp.refresh = idp.exchange
	return &ssoEnv{env: e, sso: NewSSO(e.svc, st, idp, cfg), idp: idp, store: st}
}

// login runs a whole login: Begin, then Complete with the state bound to
// the same browser and the code the provider would send.
func (e *ssoEnv) login(t *testing.T) (*Session, error) {
	t.Helper()
	ctx := context.Background()
	authURL, state, err := e.sso.Begin(ctx, "#/kb/1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(authURL, url.QueryEscape(state)) {
		t.Fatalf("auth URL %q lacks the state", authURL)
	}
	sess, returnTo, err := e.sso.Complete(ctx, Callback{State: state, BoundState: state, Code: "good-code"})
	if err == nil && returnTo != "#/kb/1" {
		t.Errorf("returnTo %q, want #/kb/1", returnTo)
	}
	return sess, err
}

func (e *ssoEnv) user(t *testing.T, id service.ID) service.User {
	t.Helper()
	u, err := e.store.users.UserByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return *u
}

func (e *ssoEnv) actions() []string {
	var out []string
	for _, ev := range e.audit.events {
		out = append(out, string(ev.Action)+"/"+string(ev.Result))
	}
	return out
}

func TestSSOFirstLoginProvisionsAndMapsGroups(t *testing.T) {
	e := newSSOEnv(t, SSOConfig{})
	e.idp.exchange.Groups = []string{"finance", " Staff ", "staff", "", "bad\x00name", strings.Repeat("g", service.MaxNameRunes+1), "FINANCE"}
	sess, err := e.login(t)
	if err != nil {
		t.Fatal(err)
	}
	u := e.user(t, sess.User.ID)
	if u.Username != "carol" || !u.SSO || u.OIDCIssuer != testIssuer || u.OIDCSubject != "sub-1" || u.Role != service.RoleUser || u.PasswordHash != "" {
		t.Fatalf("provisioned user %+v", u)
	}
	// Trimmed, each once (case-insensitively), unusable names dropped.
	if got := e.store.groups[u.ID]; !slices.Equal(got, []string{"finance", "Staff"}) {
		t.Errorf("synced groups %q, want [finance Staff]", got)
	}
	o, err := e.store.OIDCSession(context.Background(), sess.TokenID)
	if err != nil || o.RefreshToken != "rt-1" || o.IDToken != "idt-1" || o.UserID != u.ID {
		t.Errorf("provider session %+v, %v", o, err)
	}
	if p, err := e.svc.Authenticate(context.Background(), sess.Token); err != nil || p.UserID != u.ID {
		t.Errorf("the new session authenticates: %+v, %v", p, err)
	}
	for _, want := range []string{"user.provision/success", "group.sync/success", "auth.sso_login/success"} {
		if !slices.Contains(e.actions(), want) {
			t.Errorf("audit %v lacks %s", e.actions(), want)
		}
	}

	// The second login finds the same user, whatever the username now says.
	e.idp.exchange.Username = "carol-renamed"
	e.idp.exchange.Groups = []string{"staff"}
	again, err := e.login(t)
	if err != nil {
		t.Fatal(err)
	}
	if again.User.ID != u.ID {
		t.Errorf("second login is user %d, want %d", again.User.ID, u.ID)
	}
	if got := e.store.groups[u.ID]; !slices.Equal(got, []string{"staff"}) {
		t.Errorf("groups after the second login %q, want [staff]", got)
	}

	// No groups claim configured (nil): memberships are left as they are.
	e.idp.exchange.Groups = nil
	if _, err := e.login(t); err != nil {
		t.Fatal(err)
	}
	if got := e.store.groups[u.ID]; !slices.Equal(got, []string{"staff"}) {
		t.Errorf("groups after a login without the claim %q, want [staff] kept", got)
	}
}

func TestSSOAdminGroupsDecideTheRole(t *testing.T) {
	e := newSSOEnv(t, SSOConfig{AdminGroups: []string{"ragent-admins"}})
	e.idp.exchange.Groups = []string{"staff", " Ragent-Admins "}
	sess, err := e.login(t)
	if err != nil {
		t.Fatal(err)
	}
	if u := e.user(t, sess.User.ID); u.Role != service.RoleAdmin {
		t.Fatalf("member of the admin group has role %s", u.Role)
	}
	// Out of the admin group: user again at the next login, and the
	// earlier session ends (the role changed: token version).
	e.idp.exchange.Groups = []string{"staff"}
	next, err := e.login(t)
	if err != nil {
		t.Fatal(err)
	}
	if u := e.user(t, next.User.ID); u.Role != service.RoleUser {
		t.Fatalf("role after leaving the admin group: %s", u.Role)
	}
	if _, err := e.svc.Authenticate(context.Background(), sess.Token); kind(err) != service.ErrUnauthenticated.Error() {
		t.Errorf("the admin session after the demotion: %v, want unauthenticated", err)
	}
	if _, err := e.svc.Authenticate(context.Background(), next.Token); err != nil {
		t.Errorf("the new session: %v", err)
	}
	// A login without the groups claim leaves the role alone.
	e.idp.exchange.Groups = nil
	last, err := e.login(t)
	if err != nil {
		t.Fatal(err)
	}
	if u := e.user(t, last.User.ID); u.Role != service.RoleUser {
		t.Errorf("role after a login without groups: %s", u.Role)
	}
}

func TestSSOWithoutAdminGroupsLeavesRolesToRagent(t *testing.T) {
	e := newSSOEnv(t, SSOConfig{})
	e.idp.exchange.Groups = []string{"ragent-admins"}
	sess, err := e.login(t)
	if err != nil {
		t.Fatal(err)
	}
	// An admin of ragent makes carol admin; the provider's groups do not undo it.
	u := e.user(t, sess.User.ID)
	u.Role = service.RoleAdmin
	if err := e.store.users.UpdateUser(context.Background(), &u, true); err != nil {
		t.Fatal(err)
	}
	e.idp.exchange.Groups = []string{"staff"}
	next, err := e.login(t)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.user(t, next.User.ID).Role; got != service.RoleAdmin {
		t.Errorf("role %s, want admin kept", got)
	}
}

func TestSSOUsernameClaim(t *testing.T) {
	for _, tc := range []struct {
		name, username, want string
	}{
		{"trimmed", "  dave  ", "ok"},
		{"empty", "", service.ErrUnauthenticated.Error()},
		{"control character", "da\nve", service.ErrUnauthenticated.Error()},
		{"too long", strings.Repeat("d", 300), service.ErrUnauthenticated.Error()},
		// A local user's name is never linked to a provider account.
		{"a local user's", "bob", service.ErrConflict.Error()},
		{"a local user's, other case", "BOB", service.ErrConflict.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSSOEnv(t, SSOConfig{})
			e.idp.exchange.Username = tc.username
			before, _ := e.store.users.CountUsers(context.Background())
			sess, err := e.login(t)
			if kind(err) != tc.want {
				t.Fatalf("login: %v, want %s", err, tc.want)
			}
			after, _ := e.store.users.CountUsers(context.Background())
			if err != nil {
				if after != before || sess != nil {
					t.Errorf("a refused login made a user (%d → %d) or a session", before, after)
				}
				return
			}
			if u := e.user(t, sess.User.ID); u.Username != "dave" {
				t.Errorf("username %q, want dave", u.Username)
			}
		})
	}
}

func TestSSOCallbackRefusalsUnit(t *testing.T) {
	ctx := context.Background()
	e := newSSOEnv(t, SSOConfig{LoginTTL: time.Minute})
	_, state, err := e.sso.Begin(ctx, "https://evil.example/")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   Callback
		want string
	}{
		{"another browser's state", Callback{State: state, BoundState: "other", Code: "good-code"}, service.ErrUnauthenticated.Error()},
		{"no cookie", Callback{State: state, Code: "good-code"}, service.ErrUnauthenticated.Error()},
		{"oversized code", Callback{State: state, BoundState: state, Code: strings.Repeat("c", maxCodeBytes+1)}, service.ErrInvalid.Error()},
		{"oversized state", Callback{State: strings.Repeat("s", maxStateBytes+1), BoundState: strings.Repeat("s", maxStateBytes+1), Code: "good-code"}, service.ErrInvalid.Error()},
		{"unknown state", Callback{State: "forged", BoundState: "forged", Code: "good-code"}, service.ErrUnauthenticated.Error()},
	} {
		if _, _, err := e.sso.Complete(ctx, tc.in); kind(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	// None of those used the login: it completes once, and the return
	// route that was not a UI route was dropped.
	_, returnTo, err := e.sso.Complete(ctx, Callback{State: state, BoundState: state, Code: "good-code"})
	if err != nil || returnTo != "" {
		t.Fatalf("the login: %q, %v", returnTo, err)
	}
	if _, _, err := e.sso.Complete(ctx, Callback{State: state, BoundState: state, Code: "good-code"}); kind(err) != service.ErrUnauthenticated.Error() {
		t.Errorf("replay: %v, want unauthenticated", err)
	}

	// The provider's refusal and an expired login use the state up.
	_, state, _ = e.sso.Begin(ctx, "")
	if _, _, err := e.sso.Complete(ctx, Callback{State: state, BoundState: state, Error: "access_denied"}); kind(err) != service.ErrUnauthenticated.Error() {
		t.Errorf("provider refusal: %v", err)
	}
	if _, _, err := e.sso.Complete(ctx, Callback{State: state, BoundState: state, Code: "good-code"}); kind(err) != service.ErrUnauthenticated.Error() {
		t.Errorf("after the provider's refusal: %v, want the state used", err)
	}
	_, state, _ = e.sso.Begin(ctx, "")
	e.clock.Add(time.Minute)
	if _, _, err := e.sso.Complete(ctx, Callback{State: state, BoundState: state, Code: "good-code"}); kind(err) != service.ErrUnauthenticated.Error() {
		t.Errorf("expired login: %v", err)
	}

	// A disabled user is refused at the callback.
	sess, err := e.login(t)
	if err != nil {
		t.Fatal(err)
	}
	u := e.user(t, sess.User.ID)
	u.Disabled = true
	if err := e.store.users.UpdateUser(ctx, &u, true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.login(t); kind(err) != service.ErrUnauthenticated.Error() {
		t.Errorf("disabled user's login: %v", err)
	}
	if n := strings.Count(strings.Join(e.actions(), " "), "auth.sso_login/success"); n != 2 {
		t.Errorf("%d successful auth.sso_login audits, want 2: %v", n, e.actions())
	}
}

func TestSSORecheck(t *testing.T) {
	ctx := context.Background()
	const every = 5 * time.Minute
	setup := func(t *testing.T) (*ssoEnv, *Session, *Session) {
		e := newSSOEnv(t, SSOConfig{Recheck: every, AdminGroups: []string{"admins"}})
		e.idp.exchange.Groups = []string{"finance", "staff"}
		e.idp.refresh.Groups = []string{"finance", "staff"}
		one, err := e.login(t)
		if err != nil {
			t.Fatal(err)
		}
		two, err := e.login(t)
		if err != nil {
			t.Fatal(err)
		}
		return e, one, two
	}
	auth := func(e *ssoEnv, s *Session) string {
		_, err := e.svc.Authenticate(ctx, s.Token)
		if errors.Is(err, service.ErrUnavailable) {
			return "unavailable"
		}
		return kind(err)
	}

	t.Run("within the interval the provider is not asked", func(t *testing.T) {
		e, one, _ := setup(t)
		e.clock.Add(every - time.Second)
		if got := auth(e, one); got != "ok" || e.idp.refreshes != 0 {
			t.Fatalf("%s with %d refreshes, want ok with none", got, e.idp.refreshes)
		}
	})

	t.Run("past it, once, and groups follow", func(t *testing.T) {
		e, one, _ := setup(t)
		e.idp.refresh.Groups = []string{"staff"}
		e.idp.refresh.RefreshToken = "rt-2"
		e.clock.Add(every)
		if got := auth(e, one); got != "ok" {
			t.Fatal(got)
		}
		if got := auth(e, one); got != "ok" || e.idp.refreshes != 1 {
			t.Fatalf("second request: %s after %d refreshes, want 1", got, e.idp.refreshes)
		}
		if got := e.store.groups[one.User.ID]; !slices.Equal(got, []string{"staff"}) {
			t.Errorf("groups after the re-check %q", got)
		}
		o, _ := e.store.OIDCSession(ctx, one.TokenID)
		if o.RefreshToken != "rt-2" || !o.CheckedAt.Equal(e.clock.Now()) {
			t.Errorf("session after the re-check %+v", o)
		}
		if e.idp.refreshedBy[0] != "rt-1" {
			t.Errorf("refreshed with %q, want the session's rt-1", e.idp.refreshedBy[0])
		}
		if !slices.Contains(e.actions(), "group.sync/success") {
			t.Errorf("no group.sync audit: %v", e.actions())
		}
	})

	t.Run("a refused refresh ends every session of the user", func(t *testing.T) {
		e, one, two := setup(t)
		e.idp.refreshErr = service.Errorf(service.ErrUnauthenticated, "user disabled")
		e.clock.Add(every)
		if got := auth(e, one); got != service.ErrUnauthenticated.Error() {
			t.Fatalf("refused refresh: %s", got)
		}
		// The other session ends with it, without asking the provider.
		if got := auth(e, two); got != service.ErrUnauthenticated.Error() || e.idp.refreshes != 1 {
			t.Errorf("other session: %s after %d refreshes, want unauthenticated after 1", got, e.idp.refreshes)
		}
		if len(e.store.sessions) != 0 {
			t.Errorf("%d provider sessions left", len(e.store.sessions))
		}
		if !slices.Contains(e.actions(), "auth.sso_recheck/denied") {
			t.Errorf("no failed sso.recheck audit: %v", e.actions())
		}
	})

	t.Run("the provider answering for someone else ends the session", func(t *testing.T) {
		e, one, _ := setup(t)
		e.idp.refresh.Subject = "sub-2"
		e.clock.Add(every)
		if got := auth(e, one); got != service.ErrUnauthenticated.Error() {
			t.Fatalf("%s, want unauthenticated", got)
		}
	})

	t.Run("an unreachable provider refuses and asks again next time", func(t *testing.T) {
		e, one, _ := setup(t)
		e.idp.refreshErr = errors.Join(service.ErrUnavailable, errors.New("connection refused"))
		e.clock.Add(every)
		if got := auth(e, one); got != "unavailable" {
			t.Fatalf("%s, want unavailable", got)
		}
		e.idp.refreshErr = nil
		if got := auth(e, one); got != "ok" || e.idp.refreshes != 2 {
			t.Fatalf("after the provider is back: %s after %d refreshes, want ok after 2", got, e.idp.refreshes)
		}
	})

	t.Run("a role change at the provider ends the session", func(t *testing.T) {
		e, one, two := setup(t)
		e.idp.refresh.Groups = []string{"staff", "admins"}
		e.clock.Add(every)
		if got := auth(e, one); got != service.ErrUnauthenticated.Error() {
			t.Fatalf("%s, want unauthenticated (sign in again as admin)", got)
		}
		if u := e.user(t, one.User.ID); u.Role != service.RoleAdmin {
			t.Errorf("role %s after the re-check, want admin", u.Role)
		}
		if got := auth(e, two); got != service.ErrUnauthenticated.Error() {
			t.Errorf("other session: %s", got)
		}
	})

	t.Run("a session without its provider side is refused", func(t *testing.T) {
		e, one, _ := setup(t)
		delete(e.store.sessions, one.TokenID)
		if got := auth(e, one); got != service.ErrUnauthenticated.Error() {
			t.Fatalf("%s, want unauthenticated", got)
		}
	})
}

func TestSSOLogout(t *testing.T) {
	ctx := context.Background()
	e := newSSOEnv(t, SSOConfig{})
	sess, err := e.login(t)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.svc.Authenticate(ctx, sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	u, err := e.sso.Logout(ctx, p)
	if err != nil || u != "https://idp.example/logout?id_token_hint=idt-1" {
		t.Fatalf("logout URL %q, %v", u, err)
	}
	if _, err := e.svc.Authenticate(ctx, sess.Token); kind(err) != service.ErrUnauthenticated.Error() {
		t.Errorf("after logout: %v", err)
	}
	// A password session has no provider side: no provider logout.
	local, err := e.svc.Login(ctx, Credentials{Username: "bob", Password: "bob-password"}, "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	lp, _ := e.svc.Authenticate(ctx, local.Token)
	if u, err := e.sso.Logout(ctx, lp); err != nil || u != "" {
		t.Errorf("password session logout: %q, %v", u, err)
	}
}
