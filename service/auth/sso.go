package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
)

// IdentityProvider is an OpenID Connect provider (package oidc).
type IdentityProvider interface {
	AuthCodeURL(ctx context.Context, state, nonce, verifier string) (string, error)
	// Exchange redeems a code; refusals are service.ErrUnauthenticated.
	Exchange(ctx context.Context, code, verifier, nonce string) (*service.Identity, error)
	// Refresh re-asks the provider about a session; a refusal (user
	// disabled, provider session ended) is service.ErrUnauthenticated.
	Refresh(ctx context.Context, refreshToken string) (*service.Identity, error)
	// EndSessionURL is the RP-initiated logout URL, "" when none.
	EndSessionURL(ctx context.Context, idToken string) (string, error)
}

// SSOStore keeps what single sign-on needs besides users.
type SSOStore interface {
	UserByIdentity(ctx context.Context, issuer, subject string) (*service.User, error)
	PutOIDCLogin(ctx context.Context, l service.OIDCLogin) error
	TakeOIDCLogin(ctx context.Context, state string, now time.Time) (*service.OIDCLogin, error)
	PutOIDCSession(ctx context.Context, o service.OIDCSession) error
	OIDCSession(ctx context.Context, tokenID string) (*service.OIDCSession, error)
	ClaimOIDCCheck(ctx context.Context, tokenID string, seen, now time.Time) (bool, error)
	SetOIDCCheck(ctx context.Context, tokenID string, checked time.Time, refreshToken, idToken string) error
	DeleteOIDCSession(ctx context.Context, tokenID string) error
	DeleteUserOIDCSessions(ctx context.Context, userID service.ID) error
	SyncOIDCGroups(ctx context.Context, userID service.ID, names []string, newID func() (service.ID, error)) (joined, left []string, err error)
	PruneOIDC(ctx context.Context, before time.Time) (int64, error)
}

// SSOConfig tunes single sign-on.
type SSOConfig struct {
	// Recheck is how long the provider's word about a session holds: the
	// first request after it asks the provider again. Default 5m.
	Recheck time.Duration
	// AdminGroups, when not empty, make the role the provider's: a member
	// of any is admin, everyone else user. Empty leaves roles to ragent.
	AdminGroups []string
	// LoginTTL bounds a login in flight; default 10m.
	LoginTTL time.Duration
}

// SSO is single sign-on through one OpenID Connect provider
// (docs/sso.md). Users are created at their first login and
// matched by the provider's issuer and subject; their memberships in
// provider-managed groups follow the groups claim at every login and
// re-check. Every request of an SSO session past the re-check interval
// asks the provider (a refresh) once, across instances: a refused refresh
// ends every session of the user (the token version rule), a changed
// groups claim changes their groups, so a user disabled or taken out of a
// group in the provider loses access at the first request past the
// interval. While the provider cannot be reached such requests are refused
// (503): access follows the directory, and nothing stands in for it.
type SSO struct {
	auth  *Service
	store SSOStore
	idp   IdentityProvider
	cfg   SSOConfig
}

// NewSSO enables single sign-on on svc: its Authenticate re-checks SSO
// sessions from now on.
func NewSSO(svc *Service, store SSOStore, idp IdentityProvider, cfg SSOConfig) *SSO {
	cfg.Recheck = cmpDuration(cfg.Recheck, 5*time.Minute)
	cfg.LoginTTL = cmpDuration(cfg.LoginTTL, 10*time.Minute)
	s := &SSO{auth: svc, store: store, idp: idp, cfg: cfg}
	svc.sso = s
	return s
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Recheck is the configured re-check interval.
func (s *SSO) Recheck() time.Duration { return s.cfg.Recheck }

// Begin starts a login: it records the state, nonce and PKCE verifier and
// returns the provider's authorization URL and the state, which the caller
// binds to the browser (a cookie). returnTo is the UI route to land on
// after the login; anything but a "#/..." route is dropped.
func (s *SSO) Begin(ctx context.Context, returnTo string) (authURL, state string, err error) {
	if !validReturnTo(returnTo) {
		returnTo = ""
	}
	l := service.OIDCLogin{State: randomToken(), Nonce: randomToken(), Verifier: randomToken() + randomToken(),
		ReturnTo: returnTo, Expires: s.auth.now().Add(s.cfg.LoginTTL)}
	authURL, err = s.idp.AuthCodeURL(ctx, l.State, l.Nonce, l.Verifier)
	if err != nil {
		return "", "", err
	}
	if err := s.store.PutOIDCLogin(ctx, l); err != nil {
		return "", "", err
	}
	return authURL, l.State, nil
}

// validReturnTo accepts a UI route ("#/kb/1"), never a URL: the callback
// redirects to "/" + it, so it cannot send the browser elsewhere.
func validReturnTo(r string) bool {
	return strings.HasPrefix(r, "#/") && len(r) <= 512 && !strings.ContainsFunc(r, unicode.IsControl)
}

// randomToken is 32 random bytes, base64url: a state, a nonce, half a verifier.
func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Callback is what the provider sends back to the callback URL.
type Callback struct {
	State string // the query's state
	Code  string
	// Error and ErrorDescription are the provider's refusal, if any.
	Error            string
	ErrorDescription string
	// BoundState is the state the browser's cookie holds: a callback
	// another browser started is refused.
	BoundState string
}

// Bounds of what the callback reads before it asks anything.
const (
	maxStateBytes = 128
	maxCodeBytes  = 4096
)

// Complete finishes a login: the state must be the one this browser
// started and not used before, the code is redeemed with the PKCE
// verifier, the ID token verified and its nonce checked. The user is
// created at their first login, their groups (and, with AdminGroups, role)
// follow the claims. Returns the new session and the UI route to land on.
func (s *SSO) Complete(ctx context.Context, in Callback) (*Session, string, error) {
	ev := service.AuditEvent{Action: service.AuditSSOLogin, TargetType: service.TargetUser}
	sess, returnTo, err := s.complete(ctx, in, &ev)
	if err != nil {
		s.auth.audit.Fail(ctx, ev, err)
		return nil, "", err
	}
	ev.ActorUserID, ev.ActorName, ev.TargetID = sess.User.ID, sess.User.Username, sess.User.ID.String()
	s.auth.audit.Record(ctx, ev)
	return sess, returnTo, nil
}

var errLoginState = service.Errorf(service.ErrUnauthenticated, "this sign-in has expired or was already used; start again")

func (s *SSO) complete(ctx context.Context, in Callback, ev *service.AuditEvent) (*Session, string, error) {
	if len(in.State) > maxStateBytes || len(in.Code) > maxCodeBytes || len(in.Error) > maxStateBytes {
		return nil, "", service.Errorf(service.ErrInvalid, "oversized callback parameters")
	}
	if in.State == "" || in.BoundState == "" || subtle.ConstantTimeCompare([]byte(in.State), []byte(in.BoundState)) != 1 {
		return nil, "", service.Errorf(service.ErrUnauthenticated, "this sign-in was not started in this browser; start again")
	}
	// Taken (deleted) before anything else: whatever happens next, this
	// state is used.
	l, err := s.store.TakeOIDCLogin(ctx, in.State, s.auth.now())
	if errors.Is(err, service.ErrNotFound) {
		return nil, "", errLoginState
	}
	if err != nil {
		return nil, "", err
	}
	if in.Error != "" {
		return nil, "", service.Errorf(service.ErrUnauthenticated, "the identity provider refused the sign-in: %s", clip(in.Error+" "+in.ErrorDescription, 200))
	}
	if in.Code == "" {
		return nil, "", service.Errorf(service.ErrInvalid, "the callback carries no code")
	}
	id, err := s.idp.Exchange(ctx, in.Code, l.Verifier, l.Nonce)
	if err != nil {
		return nil, "", err
	}
	ev.TargetID = clip(id.Username, maxUsernameRunes)
	u, err := s.provision(ctx, id)
	if err != nil {
		return nil, "", err
	}
	if u.Disabled {
		return nil, "", service.Errorf(service.ErrUnauthenticated, "account is disabled")
	}
	if err := s.apply(ctx, u, id, false); err != nil {
		return nil, "", err
	}
	sess, err := s.auth.session(u)
	if err != nil {
		return nil, "", err
	}
	if err := s.store.PutOIDCSession(ctx, service.OIDCSession{
		TokenID: sess.TokenID, UserID: u.ID, RefreshToken: id.RefreshToken, IDToken: id.IDToken,
		CheckedAt: s.auth.now(), Expires: sess.Expires,
	}); err != nil {
		return nil, "", err
	}
	return sess, l.ReturnTo, nil
}

func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.TrimSpace(s))
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// provision returns the user the identity names, creating them at their
// first login. A username a local user holds is refused, never linked: a
// provider account of the same name is not proof of being that user.
func (s *SSO) provision(ctx context.Context, id *service.Identity) (*service.User, error) {
	u, err := s.store.UserByIdentity(ctx, id.Issuer, id.Subject)
	if err == nil || !errors.Is(err, service.ErrNotFound) {
		return u, err
	}
	name := strings.TrimSpace(id.Username)
	if err := validUsername(name); err != nil {
		return nil, service.Errorf(service.ErrUnauthenticated, "the identity provider's username %q cannot be used: %v", clip(name, maxUsernameRunes), err)
	}
	uid, err := s.auth.ids.NextID()
	if err != nil {
		return nil, err
	}
	u = &service.User{ID: uid, Username: name, Role: service.RoleUser, OIDCIssuer: id.Issuer, OIDCSubject: id.Subject, SSO: true}
	ev := service.AuditEvent{Action: service.AuditUserProvision, TargetType: service.TargetUser, ActorName: name,
		Detail: fmt.Sprintf("username=%s subject=%s", name, clip(id.Subject, 64))}
	err = s.auth.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		err := s.auth.store.CreateUser(ctx, u)
		if errors.Is(err, service.ErrConflict) {
			return service.Errorf(service.ErrConflict, "username %q is taken by another account; an admin must rename or remove it", name)
		}
		ev.TargetID, ev.ActorUserID = u.ID.String(), u.ID
		return err
	})
	if err != nil {
		// Two first logins at once: the other one created the user.
		if again, err2 := s.store.UserByIdentity(ctx, id.Issuer, id.Subject); err2 == nil {
			return again, nil
		}
		return nil, err
	}
	return u, nil
}

// groupNames keeps the provider's group names ragent can hold (the bounds
// of a group name), each once.
func groupNames(in []string) []string {
	out := make([]string, 0, len(in))
	seen := map[string]bool{}
	for _, g := range in {
		g = strings.TrimSpace(g)
		key := strings.ToLower(g)
		if g == "" || seen[key] || utf8.RuneCountInString(g) > service.MaxNameRunes || strings.ContainsFunc(g, unicode.IsControl) {
			continue
		}
		seen[key] = true
		out = append(out, g)
	}
	return out
}

// apply makes u's provider-managed groups and (with AdminGroups) role
// follow id. A role change ends u's sessions (the token version rule);
// recheck reports it as the end of the caller's.
func (s *SSO) apply(ctx context.Context, u *service.User, id *service.Identity, recheck bool) error {
	if id.Groups != nil {
		names := groupNames(id.Groups)
		joined, left, err := s.store.SyncOIDCGroups(ctx, u.ID, names, s.auth.ids.NextID)
		if err != nil {
			return err
		}
		if len(joined) > 0 || len(left) > 0 {
			s.auth.audit.Record(ctx, service.AuditEvent{
				Action: service.AuditGroupSync, TargetType: service.TargetUser, TargetID: u.ID.String(),
				ActorUserID: u.ID, ActorName: u.Username,
				Detail: clip(fmt.Sprintf("joined=%s left=%s", strings.Join(joined, ","), strings.Join(left, ",")), 500),
			})
		}
	}
	if len(s.cfg.AdminGroups) == 0 || id.Groups == nil {
		return nil
	}
	role := service.RoleUser
	for _, g := range id.Groups {
		if slices.ContainsFunc(s.cfg.AdminGroups, func(a string) bool { return strings.EqualFold(a, strings.TrimSpace(g)) }) {
			role = service.RoleAdmin
		}
	}
	if role == u.Role {
		return nil
	}
	old := u.Role
	u.Role = role
	if err := s.auth.store.UpdateUser(ctx, u, true); err != nil {
		return err
	}
	s.auth.audit.Record(ctx, service.AuditEvent{
		Action: service.AuditUserUpdate, TargetType: service.TargetUser, TargetID: u.ID.String(),
		ActorUserID: u.ID, ActorName: u.Username, Detail: fmt.Sprintf("role=%s (was %s, from the identity provider)", role, old),
	})
	if recheck {
		return service.Errorf(service.ErrUnauthenticated, "your role changed at the identity provider; sign in again")
	}
	return nil
}

// recheck asks the provider about an SSO session past the interval. Called
// by Authenticate for every request of an SSO user.
func (s *SSO) recheck(ctx context.Context, u *service.User, tokenID string) error {
	o, err := s.store.OIDCSession(ctx, tokenID)
	if errors.Is(err, service.ErrNotFound) {
		return service.Errorf(service.ErrUnauthenticated, "this session has ended; sign in again")
	}
	if err != nil {
		return err
	}
	now := s.auth.now()
	if now.Sub(o.CheckedAt) < s.cfg.Recheck {
		return nil
	}
	claimed, err := s.store.ClaimOIDCCheck(ctx, tokenID, o.CheckedAt, now)
	if err != nil || !claimed {
		// Another request is asking the provider right now.
		return err
	}
	ev := service.AuditEvent{Action: service.AuditSSORecheck, TargetType: service.TargetUser, TargetID: u.ID.String(),
		ActorUserID: u.ID, ActorName: u.Username}
	id, err := s.idp.Refresh(ctx, o.RefreshToken)
	if err == nil && (id.Subject != u.OIDCSubject || id.Issuer != u.OIDCIssuer) {
		err = service.Errorf(service.ErrUnauthenticated, "the identity provider answered for another user")
	}
	switch {
	case errors.Is(err, service.ErrUnauthenticated):
		// The provider says no: every session of the user ends.
		if _, endErr := s.auth.store.EndSessions(ctx, u.ID); endErr != nil && !errors.Is(endErr, service.ErrNotFound) {
			return endErr
		}
		if delErr := s.store.DeleteUserOIDCSessions(ctx, u.ID); delErr != nil {
			s.auth.log.WarnContext(ctx, "provider sessions of an ended user not forgotten", "err", delErr)
		}
		s.auth.audit.Fail(ctx, ev, err)
		return service.Errorf(service.ErrUnauthenticated, "your identity provider ended this session; sign in again")
	case err != nil:
		// Asked again at the next request.
		if setErr := s.store.SetOIDCCheck(ctx, tokenID, o.CheckedAt, "", ""); setErr != nil {
			s.auth.log.WarnContext(ctx, "re-check not reset", "err", setErr)
		}
		s.auth.log.WarnContext(ctx, "identity provider re-check failed", "err", err)
		return service.Errorf(service.ErrUnavailable, "the identity provider cannot be reached to confirm this session; try again shortly")
	}
	if err := s.store.SetOIDCCheck(ctx, tokenID, now, id.RefreshToken, id.IDToken); err != nil {
		return err
	}
	if err := s.apply(ctx, u, id, true); err != nil {
		return err
	}
	return nil
}

// Logout ends the caller's session and returns the provider's logout URL
// for it ("" for a session that did not come from the provider, or a
// provider without RP-initiated logout).
func (s *SSO) Logout(ctx context.Context, p service.Principal) (string, error) {
	o, err := s.store.OIDCSession(ctx, p.TokenID)
	if err != nil && !errors.Is(err, service.ErrNotFound) {
		return "", err
	}
	if err := s.auth.Logout(ctx, p); err != nil {
		return "", err
	}
	if o == nil {
		return "", nil
	}
	if err := s.store.DeleteOIDCSession(ctx, p.TokenID); err != nil {
		return "", err
	}
	s.auth.audit.Record(ctx, service.AuditEvent{Action: service.AuditSSOLogout, TargetType: service.TargetUser, TargetID: p.UserID.String(),
		ActorUserID: p.UserID, ActorName: p.Username})
	url, err := s.idp.EndSessionURL(ctx, o.IDToken)
	if err != nil {
		// The ragent session has ended; the provider's stays.
		s.auth.log.WarnContext(ctx, "no provider logout URL", "err", err)
		return "", nil
	}
	return url, nil
}

// Run forgets expired logins in flight and provider sessions, hourly.
func (s *SSO) Run(ctx context.Context) error {
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		if _, err := s.store.PruneOIDC(ctx, s.auth.now()); err != nil && ctx.Err() == nil {
			s.auth.log.WarnContext(ctx, "expired SSO logins and sessions not pruned", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
