// Package auth is the use case of users, login, tokens and roles.
//
// Tokens are HMAC-signed (HS256) with an expiry, so any instance verifies them
// without a network call; logout records the token id in the store (Postgres),
// which Authenticate reads in the same lookup as the user row, so a logout
// holds on every instance and cannot be undone by a cache losing keys.
//
// Every token also carries its user's token version. The version is bumped in
// the user row on a password change, on disable, on a role change and on "log
// out everywhere", and Authenticate compares it with the row it reads anyway
// (to see disabled and deleted users), so every older token stops working at
// once on every instance, also after the user is enabled again.
//
// Login attempts are reserved before the password is checked (attempts.go):
// per client address across all usernames, per username and client address,
// and per username alone (a wider limit, against many addresses guessing one
// account); a client with a valid device cookie of the account (device.go)
// is counted in its own bucket instead. While the shared counters cannot be
// reached, each instance counts in memory. Every path through Login does
// exactly one password comparison at the configured cost, so its timing does
// not reveal whether a username exists or is disabled.
package auth

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/ragent-go/ragent/service"
)

// Store keeps users.
type Store interface {
	CreateUser(ctx context.Context, u *service.User) error
	UserByID(ctx context.Context, id service.ID) (*service.User, error)
	UserByUsername(ctx context.Context, username string) (*service.User, error)
	ListUsers(ctx context.Context, after service.ID, limit int) ([]*service.User, error)
	CountUsers(ctx context.Context) (int64, error)
	// UpdateUser stores u's role, disabled flag and password hash. With
	// endSessions it also increments the user's token version in the same
	// statement and sets u.TokenVersion to the new value.
	UpdateUser(ctx context.Context, u *service.User, endSessions bool) error
	// SetPassword stores a new password hash of a live, enabled user and
	// increments the token version in the same statement, returning the new
	// version; a missing or disabled user is service.ErrNotFound. Only the
	// hash and version are written, so a concurrent disable is never undone.
	SetPassword(ctx context.Context, id service.ID, passwordHash string) (tokenVersion int64, err error)
	// EndSessions increments the token version of a live user and returns it.
	EndSessions(ctx context.Context, id service.ID) (tokenVersion int64, err error)
	DeleteUser(ctx context.Context, id service.ID) error
	// SessionUser returns the live user id (service.ErrNotFound otherwise)
	// and whether tokenID was logged out, in one lookup.
	SessionUser(ctx context.Context, id service.ID, tokenID string) (u *service.User, revoked bool, err error)
	// RevokeToken records tokenID as logged out until expires.
	RevokeToken(ctx context.Context, tokenID string, expires time.Time) error
	// PruneRevokedTokens forgets revocations of tokens expired before t.
	PruneRevokedTokens(ctx context.Context, before time.Time) (int64, error)
}

// Config tunes the service. NewAPIKeys reads only Logger and Now,
// LimitFailures also MaxClientFailures and FailWindow.
type Config struct {
	Secret          []byte        // HMAC key shared by every instance
	TokenTTL        time.Duration // default 24h
	MaxFailures     int           // failed logins per username+IP (and per trusted device) before a pause; default 5
	MaxUserFailures int           // failed logins per username from any address; default 20
	FailWindow      time.Duration // default 15m
	BcryptCost      int           // default bcrypt.DefaultCost
	MinPassword     int           // default 8
	// PasswordLoginOff refuses password logins of everyone but
	// BreakGlassUser, a local admin (RAGENT_PASSWORD_LOGIN=false).
	PasswordLoginOff bool
	BreakGlassUser   string
	KeyMaxTTL        time.Duration    // an API key's longest life from its creation; default DefaultKeyMaxTTL
	Logger           *slog.Logger     // nil discards
	Now              func() time.Time // nil is time.Now

	// MaxClientFailures bounds failed logins from one client address (an
	// IPv6 /64) across all usernames, and, in a counter of their own, failed
	// API-key authentications; default 100.
	MaxClientFailures int
}

// withClock fills in the Logger and Now defaults.
func (c Config) withClock() Config {
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Service implements authentication and user management.
type Service struct {
	store    Store
	attempts *failures
	ids      service.IDGenerator
	audit    *service.Auditor
	cfg      Config
	now      func() time.Time
	log      *slog.Logger

	// dummyHash is compared when the username is unknown; it has the
	// configured cost so that path takes as long as a real comparison.
	dummyHash []byte
	// compare checks a password against a hash (bcrypt); tests count calls.
	compare func(hash, password []byte) error
	// deviceSecret signs device cookies (device.go).
	deviceSecret []byte
	// sso, when single sign-on is on (NewSSO), re-checks SSO sessions.
	sso *SSO
}

// New returns a Service. Logins, password changes and user changes are
// recorded in audit.
func New(store Store, attempts Attempts, ids service.IDGenerator, audit *service.Auditor, cfg Config) (*Service, error) {
	if audit == nil {
		return nil, errors.New("auth: an auditor is required")
	}
	if len(cfg.Secret) < 32 {
		return nil, errors.New("auth: secret must be at least 32 bytes")
	}
	cfg.TokenTTL = cmp.Or(max(cfg.TokenTTL, 0), 24*time.Hour)
	cfg.MaxFailures = cmp.Or(max(cfg.MaxFailures, 0), 5)
	cfg.MaxUserFailures = cmp.Or(max(cfg.MaxUserFailures, 0), 20)
	if cfg.MaxUserFailures < cfg.MaxFailures {
		return nil, errors.New("auth: the per-username failure limit must not be below the per-username-and-address limit")
	}
	cfg.MaxClientFailures = cmp.Or(max(cfg.MaxClientFailures, 0), 100)
	cfg.FailWindow = cmp.Or(max(cfg.FailWindow, 0), 15*time.Minute)
	cfg.BcryptCost = cmp.Or(cfg.BcryptCost, bcrypt.DefaultCost)
	if cfg.BcryptCost < bcrypt.MinCost || cfg.BcryptCost > bcrypt.MaxCost {
		return nil, fmt.Errorf("auth: bcrypt cost must be %d to %d", bcrypt.MinCost, bcrypt.MaxCost)
	}
	cfg.MinPassword = cmp.Or(cfg.MinPassword, 8)
	cfg = cfg.withClock()
	var random [18]byte
	if _, err := rand.Read(random[:]); err != nil {
		return nil, err
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte(hex.EncodeToString(random[:])), cfg.BcryptCost)
	if err != nil {
		return nil, err
	}
	return &Service{
		store: store, ids: ids, audit: audit, cfg: cfg, now: cfg.Now, log: cfg.Logger,
		attempts:  newFailures(attempts, cfg),
		dummyHash: dummy, compare: bcrypt.CompareHashAndPassword, deviceSecret: deviceKey(cfg.Secret),
	}, nil
}

func newFailures(shared Attempts, cfg Config) *failures {
	return &failures{shared: shared, local: newLocalAttempts(cfg.Now), window: cfg.FailWindow, log: cfg.Logger}
}

// Session is the result of a successful login.
type Session struct {
	Token   string        `json:"token"`
	User    *service.User `json:"user"`
	Expires time.Time     `json:"expiresAt"`
	// Device is a fresh device cookie after a login (device.go), for the
	// client to keep for DeviceTTL; empty after a password change.
	Device string `json:"-"`
	// TokenID identifies the token (its jti).
	TokenID string `json:"-"`
}

// Credentials is one login attempt.
type Credentials struct {
	Username string
	Password string
	// Device is the client's device cookie, if it has one.
	Device string
}

// The bounds of what Login reads: longer input is refused before it
// reaches a counter, a query, the audit log or a log line. No stored
// username or password is longer (validUsername, validPassword).
const (
	maxUsernameRunes = 64
	maxPasswordBytes = 72 // bcrypt's input limit
)

// errBadCredentials is deliberately the same for an unknown user, a wrong
// password and a disabled account, so login does not reveal which.
var errBadCredentials = service.Errorf(service.ErrUnauthenticated, "invalid username or password")

// Login checks the credentials and issues a token. Attempts are counted per
// client address, per username and address and per username alone, or, with
// a valid device cookie, per device (attempts.go); past a limit logins pause
// with service.ErrBusy, whose details carry retryAfter in seconds. Every
// login with a username is recorded in the audit log: success (the user is
// the actor), denied (wrong credentials), locked (the pause) or invalid; the
// username tried is the target.
func (s *Service) Login(ctx context.Context, in Credentials, ip string) (*Session, error) {
	in.Username = strings.TrimSpace(in.Username)
	sess, err := s.login(ctx, in, ip)
	ev := service.AuditEvent{Action: service.AuditLogin, TargetType: service.TargetUser, TargetID: in.Username}
	if err != nil {
		s.audit.Fail(ctx, ev, err)
		return nil, err
	}
	ev.ActorUserID, ev.ActorName = sess.User.ID, sess.User.Username
	s.audit.Record(ctx, ev)
	return sess, nil
}

func (s *Service) login(ctx context.Context, in Credentials, ip string) (*Session, error) {
	if in.Username == "" || in.Password == "" {
		return nil, service.Errorf(service.ErrInvalid, "username and password are required")
	}
	if err := validLogin(in.Username, in.Password); err != nil {
		return nil, err
	}
	if s.cfg.PasswordLoginOff && !strings.EqualFold(in.Username, s.cfg.BreakGlassUser) {
		return nil, service.Errorf(service.ErrForbidden, "password sign-in is turned off; use single sign-on")
	}
	u, err := s.store.UserByUsername(ctx, in.Username)
	if err != nil && !errors.Is(err, service.ErrNotFound) {
		return nil, err
	}
	// A device this user signed in from before has its own bucket; any
	// other client is counted per address and per account.
	groups := [][]Counter{s.clientCounter(ip), s.accountCounters(in.Username, ip)}
	if u != nil {
		if nonce, ok := s.trustedDevice(in.Device, u.ID); ok {
			groups = [][]Counter{{{Group: "device:" + nonce, Limit: s.cfg.MaxFailures, Clear: true}}}
		}
	}
	held, wait := s.attempts.reserve(ctx, groups...)
	if wait > 0 {
		return nil, busy(wait, "too many failed logins; try again later")
	}
	// One comparison at the configured cost on every path: an unknown user is
	// compared with the dummy hash and a disabled one with their own, so the
	// answer takes as long as for a live user with a wrong password.
	hash := s.dummyHash
	if u != nil {
		hash = []byte(u.PasswordHash)
	}
	match := s.compare(hash, []byte(in.Password)) == nil
	// With password sign-in off only the break-glass admin gets here, and
	// only while they are a local admin.
	refused := s.cfg.PasswordLoginOff && (u == nil || u.SSO || !u.IsAdmin())
	if u == nil || u.Disabled || !match || refused {
		// The reserved attempts stay counted as the failure.
		return nil, errBadCredentials
	}
	s.attempts.release(ctx, held, true)
	sess, err := s.session(u)
	if err != nil {
		return nil, err
	}
	if sess.Device, err = s.newDevice(u.ID); err != nil {
		return nil, err
	}
	return sess, nil
}

// validLogin bounds a login's username and password; what is longer than
// any stored one cannot match and is refused before it costs anything.
func validLogin(username, password string) error {
	if utf8.RuneCountInString(username) > maxUsernameRunes {
		return service.WithDetails(service.ErrInvalid, fmt.Sprintf("username must be at most %d characters", maxUsernameRunes), map[string]string{"field": "username"})
	}
	if strings.ContainsFunc(username, unicode.IsControl) {
		return service.WithDetails(service.ErrInvalid, "username must not contain control characters", map[string]string{"field": "username"})
	}
	if len(password) > maxPasswordBytes {
		return service.WithDetails(service.ErrInvalid, fmt.Sprintf("password must be at most %d bytes", maxPasswordBytes), map[string]string{"field": "password"})
	}
	return nil
}

// clientCounter counts failed logins from ip across all usernames.
func (s *Service) clientCounter(ip string) []Counter {
	return []Counter{{Group: "ip:" + clientKey(ip), Limit: s.cfg.MaxClientFailures}}
}

// accountCounters count failed logins of username (case-insensitively, as
// usernames are matched) from ip and from anywhere; one group, so they are
// checked together.
func (s *Service) accountCounters(username, ip string) []Counter {
	group := "user:" + usernameKey(username)
	return []Counter{
		{Group: group, Limit: s.cfg.MaxUserFailures},
		{Group: group, Name: ":" + clientKey(ip), Limit: s.cfg.MaxFailures, Clear: true},
	}
}

func (s *Service) session(u *service.User) (*Session, error) {
	token, jti, exp, err := s.issue(u)
	if err != nil {
		return nil, err
	}
	return &Session{Token: token, User: u, Expires: exp, TokenID: jti}, nil
}

type claims struct {
	Role string `json:"role"`
	// Version is the user's token version at issue; a bump in the user row
	// ends every token that carries an older one. Tokens issued before
	// versions existed have none (0), which matches a user never bumped.
	Version int64 `json:"ver"`
	jwt.RegisteredClaims
}

func (s *Service) issue(u *service.User) (token, jti string, exp time.Time, err error) {
	now := s.now()
	exp = now.Add(s.cfg.TokenTTL)
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", "", time.Time{}, err
	}
	jti = hex.EncodeToString(id[:])
	c := claims{
		Role:    string(u.Role),
		Version: u.TokenVersion,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   u.ID.String(),
			ID:        jti,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(exp),
			Issuer:    "ragent",
		},
	}
	token, err = jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.cfg.Secret)
	return token, jti, exp, err
}

// Authenticate verifies a token and returns its principal. It rejects
// tampered, expired and revoked tokens, tokens of disabled or deleted users
// and tokens older than the user's last password change, disable, role change
// or "log out everywhere". The user row is read from the store on every call,
// which keeps Postgres the one truth for all of these, on every instance.
func (s *Service) Authenticate(ctx context.Context, token string) (service.Principal, error) {
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return s.cfg.Secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer("ragent"),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(s.now),
	)
	if err != nil {
		return service.Principal{}, service.Errorf(service.ErrUnauthenticated, "invalid or expired token")
	}
	id, err := service.ParseID(c.Subject)
	if err != nil {
		return service.Principal{}, service.Errorf(service.ErrUnauthenticated, "invalid token subject")
	}
	u, revoked, err := s.store.SessionUser(ctx, id, c.ID)
	if errors.Is(err, service.ErrNotFound) || (err == nil && u.Disabled) {
		return service.Principal{}, service.Errorf(service.ErrUnauthenticated, "account is disabled or deleted")
	}
	if err != nil {
		return service.Principal{}, err
	}
	if revoked {
		return service.Principal{}, service.Errorf(service.ErrUnauthenticated, "token has been revoked")
	}
	if c.Version != u.TokenVersion {
		return service.Principal{}, service.Errorf(service.ErrUnauthenticated, "this session has ended; sign in again")
	}
	if u.SSO && s.sso != nil {
		if err := s.sso.recheck(ctx, u, c.ID); err != nil {
			return service.Principal{}, err
		}
	}
	return service.Principal{UserID: u.ID, Username: u.Username, Role: u.Role, TokenID: c.ID, Expires: c.ExpiresAt.Time}, nil
}

// Logout revokes the caller's token on every instance: a row in the store
// until the token would have expired anyway.
func (s *Service) Logout(ctx context.Context, p service.Principal) error {
	if !p.Expires.After(s.now()) {
		return nil
	}
	return s.store.RevokeToken(ctx, p.TokenID, p.Expires)
}

// pruneEvery is how often Run forgets revocations of expired tokens.
const pruneEvery = time.Hour

// Run forgets revocations of expired tokens, now and every hour, until ctx
// ends. Every instance runs it; the deletes are idempotent.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		if n, err := s.store.PruneRevokedTokens(ctx, s.now()); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "expired token revocations not pruned", "err", err)
		} else if n > 0 {
			s.log.DebugContext(ctx, "pruned expired token revocations", "rows", n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// LogoutEverywhere ends every session of the caller, on every instance, by
// bumping their token version; the caller's own token ends too.
func (s *Service) LogoutEverywhere(ctx context.Context, p service.Principal) error {
	_, err := s.store.EndSessions(ctx, p.UserID)
	return err
}
