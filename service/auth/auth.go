// Package auth is the use case of users, login, tokens and roles.
//
// Tokens are HMAC-signed (HS256) with an expiry, so any instance verifies them
// without a network call; logout records the token id in a revocation list
// that the caller's store keeps (Redis in production). When that list cannot
// be read, signed tokens still verify: availability wins over an instant
// logout, and the event is logged.
package auth

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

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
	UpdateUser(ctx context.Context, u *service.User) error
	DeleteUser(ctx context.Context, id service.ID) error
}

// Revocations records logged-out tokens until they would have expired anyway.
type Revocations interface {
	Revoke(ctx context.Context, tokenID string, ttl time.Duration) error
	Revoked(ctx context.Context, tokenID string) (bool, error)
}

// Attempts counts failed logins per username and client address.
type Attempts interface {
	// Fail records a failure and returns the failures within window.
	Fail(ctx context.Context, username, ip string, window time.Duration) (int, error)
	// Failures returns the failures within the current window.
	Failures(ctx context.Context, username, ip string) (int, error)
	Reset(ctx context.Context, username, ip string) error
}

// Config tunes the service.
type Config struct {
	Secret      []byte        // HMAC key shared by every instance
	TokenTTL    time.Duration // default 24h
	MaxFailures int           // failed logins per username+IP before a pause; default 5
	FailWindow  time.Duration // default 15m
	BcryptCost  int           // default bcrypt.DefaultCost
	MinPassword int           // default 8
}

// Service implements authentication and user management.
type Service struct {
	store    Store
	revoked  Revocations
	attempts Attempts
	ids      service.IDGenerator
	cfg      Config
	now      func() time.Time
	log      *slog.Logger
}

// New returns a Service. now may be nil (time.Now).
func New(store Store, revoked Revocations, attempts Attempts, ids service.IDGenerator, cfg Config, log *slog.Logger, now func() time.Time) (*Service, error) {
	if len(cfg.Secret) < 32 {
		return nil, errors.New("auth: secret must be at least 32 bytes")
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = 24 * time.Hour
	}
	if cfg.MaxFailures <= 0 {
		cfg.MaxFailures = 5
	}
	if cfg.FailWindow <= 0 {
		cfg.FailWindow = 15 * time.Minute
	}
	if cfg.BcryptCost == 0 {
		cfg.BcryptCost = bcrypt.DefaultCost
	}
	if cfg.MinPassword == 0 {
		cfg.MinPassword = 8
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: store, revoked: revoked, attempts: attempts, ids: ids, cfg: cfg, now: now, log: log}, nil
}

// Session is the result of a successful login.
type Session struct {
	Token   string        `json:"token"`
	User    *service.User `json:"user"`
	Expires time.Time     `json:"expiresAt"`
}

// errBadCredentials is deliberately the same for an unknown user, a wrong
// password and a disabled account, so login does not reveal which.
var errBadCredentials = service.Errorf(service.ErrUnauthenticated, "invalid username or password")

// Login checks the credentials and issues a token. Failures are counted per
// username and ip; past the limit logins pause with service.ErrBusy.
func (s *Service) Login(ctx context.Context, username, password, ip string) (*Session, error) {
	username = strings.TrimSpace(username)
	if username == "" || password == "" {
		return nil, service.Errorf(service.ErrInvalid, "username and password are required")
	}
	// Count failures case-insensitively, as usernames are matched.
	counted := strings.ToLower(username)
	if n, err := s.attempts.Failures(ctx, counted, ip); err != nil {
		s.log.WarnContext(ctx, "login attempt counter unavailable; not limiting", "err", err)
	} else if n >= s.cfg.MaxFailures {
		return nil, service.Errorf(service.ErrBusy, "too many failed logins; try again later")
	}
	u, err := s.store.UserByUsername(ctx, username)
	if err != nil && !errors.Is(err, service.ErrNotFound) {
		return nil, err
	}
	ok := u != nil && !u.Disabled && bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)) == nil
	if u == nil {
		// Spend the same time as a real comparison so timing does not reveal
		// whether the username exists.
		_ = bcrypt.CompareHashAndPassword(dummyHash, []byte(password))
	}
	if !ok {
		if _, err := s.attempts.Fail(ctx, counted, ip, s.cfg.FailWindow); err != nil {
			s.log.WarnContext(ctx, "login attempt counter unavailable", "err", err)
		}
		return nil, errBadCredentials
	}
	if err := s.attempts.Reset(ctx, counted, ip); err != nil {
		s.log.WarnContext(ctx, "login attempt counter unavailable", "err", err)
	}
	token, exp, err := s.issue(u)
	if err != nil {
		return nil, err
	}
	return &Session{Token: token, User: u, Expires: exp}, nil
}

var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("not a real password"), bcrypt.MinCost)

type claims struct {
	Role string `json:"role"`
	jwt.RegisteredClaims
}

func (s *Service) issue(u *service.User) (string, time.Time, error) {
	now := s.now()
	exp := now.Add(s.cfg.TokenTTL)
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", time.Time{}, err
	}
	c := claims{
		Role: string(u.Role),
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   u.ID.String(),
			ID:        hex.EncodeToString(jti[:]),
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(exp),
			Issuer:    "ragent",
		},
	}
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.cfg.Secret)
	return token, exp, err
}

// Authenticate verifies a token and returns its principal. It rejects
// tampered, expired and revoked tokens and tokens of disabled or deleted users.
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
	revoked, err := s.revoked.Revoked(ctx, c.ID)
	if err != nil {
		s.log.WarnContext(ctx, "revocation list unavailable; accepting signed token", "err", err)
	} else if revoked {
		return service.Principal{}, service.Errorf(service.ErrUnauthenticated, "token has been revoked")
	}
	u, err := s.store.UserByID(ctx, id)
	if errors.Is(err, service.ErrNotFound) || (err == nil && u.Disabled) {
		return service.Principal{}, service.Errorf(service.ErrUnauthenticated, "account is disabled or deleted")
	}
	if err != nil {
		return service.Principal{}, err
	}
	return service.Principal{UserID: u.ID, Username: u.Username, Role: u.Role, TokenID: c.ID, Expires: c.ExpiresAt.Time}, nil
}

// Logout revokes the caller's token on every instance. It fails with
// service.ErrUnavailable when the revocation cannot be recorded.
func (s *Service) Logout(ctx context.Context, p service.Principal) error {
	ttl := p.Expires.Sub(s.now())
	if ttl <= 0 {
		return nil
	}
	if err := s.revoked.Revoke(ctx, p.TokenID, ttl); err != nil {
		return fmt.Errorf("%w: logout cannot be recorded: %v", service.ErrUnavailable, err)
	}
	return nil
}

// UserInput creates or changes a user. Nil fields are left unchanged on update.
type UserInput struct {
	Username *string       `json:"username"`
	Password *string       `json:"password"`
	Role     *service.Role `json:"role"`
	Disabled *bool         `json:"disabled"`
}

// Me returns the caller's user.
func (s *Service) Me(ctx context.Context, p service.Principal) (*service.User, error) {
	return s.store.UserByID(ctx, p.UserID)
}

// CreateUser adds a user (admins only).
func (s *Service) CreateUser(ctx context.Context, p service.Principal, in UserInput) (*service.User, error) {
	if !p.IsAdmin() {
		return nil, service.ErrForbidden
	}
	if in.Username == nil || in.Password == nil {
		return nil, service.Errorf(service.ErrInvalid, "username and password are required")
	}
	role := service.RoleUser
	if in.Role != nil {
		role = *in.Role
	}
	u, err := s.newUser(*in.Username, *in.Password, role)
	if err != nil {
		return nil, err
	}
	if in.Disabled != nil {
		u.Disabled = *in.Disabled
	}
	if err := s.store.CreateUser(ctx, u); err != nil {
		if errors.Is(err, service.ErrConflict) {
			return nil, service.Errorf(service.ErrConflict, "username %q is taken", u.Username)
		}
		return nil, err
	}
	return u, nil
}

func (s *Service) newUser(username, password string, role service.Role) (*service.User, error) {
	username = strings.TrimSpace(username)
	if err := validUsername(username); err != nil {
		return nil, err
	}
	if !role.Valid() {
		return nil, service.Errorf(service.ErrInvalid, "role must be admin or user")
	}
	hash, err := s.hash(password)
	if err != nil {
		return nil, err
	}
	id, err := s.ids.NextID()
	if err != nil {
		return nil, err
	}
	return &service.User{ID: id, Username: username, PasswordHash: hash, Role: role}, nil
}

func validUsername(name string) error {
	if n := len([]rune(name)); n < 2 || n > 64 {
		return service.Errorf(service.ErrInvalid, "username must be 2 to 64 characters")
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return service.Errorf(service.ErrInvalid, "username must not contain spaces or control characters")
		}
	}
	return nil
}

func (s *Service) hash(password string) (string, error) {
	if len([]rune(password)) < s.cfg.MinPassword {
		return "", service.Errorf(service.ErrInvalid, "password must be at least %d characters", s.cfg.MinPassword)
	}
	if len(password) > 72 { // bcrypt's input limit
		return "", service.Errorf(service.ErrInvalid, "password must be at most 72 bytes")
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), s.cfg.BcryptCost)
	return string(h), err
}

// ListUsers pages through users (admins only).
func (s *Service) ListUsers(ctx context.Context, p service.Principal, after service.ID, limit int) ([]*service.User, error) {
	if !p.IsAdmin() {
		return nil, service.ErrForbidden
	}
	return s.store.ListUsers(ctx, after, limit)
}

// UpdateUser changes role, disabled flag or password (admins only). An admin
// cannot demote or disable themself, so there is always one admin left.
func (s *Service) UpdateUser(ctx context.Context, p service.Principal, id service.ID, in UserInput) (*service.User, error) {
	if !p.IsAdmin() {
		return nil, service.ErrForbidden
	}
	if in.Username != nil {
		return nil, service.Errorf(service.ErrInvalid, "username cannot be changed")
	}
	u, err := s.store.UserByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if in.Role != nil {
		if !in.Role.Valid() {
			return nil, service.Errorf(service.ErrInvalid, "role must be admin or user")
		}
		if id == p.UserID && *in.Role != service.RoleAdmin {
			return nil, service.Errorf(service.ErrConflict, "you cannot remove your own admin role")
		}
		u.Role = *in.Role
	}
	if in.Disabled != nil {
		if id == p.UserID && *in.Disabled {
			return nil, service.Errorf(service.ErrConflict, "you cannot disable yourself")
		}
		u.Disabled = *in.Disabled
	}
	if in.Password != nil {
		if u.PasswordHash, err = s.hash(*in.Password); err != nil {
			return nil, err
		}
	}
	if err := s.store.UpdateUser(ctx, u); err != nil {
		return nil, err
	}
	return u, nil
}

// DeleteUser removes a user (admins only; not themself).
func (s *Service) DeleteUser(ctx context.Context, p service.Principal, id service.ID) error {
	if !p.IsAdmin() {
		return service.ErrForbidden
	}
	if id == p.UserID {
		return service.Errorf(service.ErrConflict, "you cannot delete yourself")
	}
	return s.store.DeleteUser(ctx, id)
}

// Bootstrap creates the first admin when there are no users. It returns the
// password it generated when password is empty (to be printed once), or "".
// Call it under the startup lock so concurrent instances create one admin.
func (s *Service) Bootstrap(ctx context.Context, username, password string) (generated string, created bool, err error) {
	n, err := s.store.CountUsers(ctx)
	if err != nil || n > 0 {
		return "", false, err
	}
	if password == "" {
		var b [12]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", false, err
		}
		password = hex.EncodeToString(b[:])
		generated = password
	}
	u, err := s.newUser(username, password, service.RoleAdmin)
	if err != nil {
		return "", false, fmt.Errorf("first admin: %w", err)
	}
	if err := s.store.CreateUser(ctx, u); err != nil {
		return "", false, fmt.Errorf("first admin: %w", err)
	}
	return generated, true, nil
}
