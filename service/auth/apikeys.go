package auth

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
)

// KeyStore keeps API keys (their hashes, never the keys).
type KeyStore interface {
	// CreateAPIKey stores k unless its owner has max live keys already
	// (service.ErrConflict), race-free.
	CreateAPIKey(ctx context.Context, k *service.APIKey, max int) error
	// APIKeyByHash returns the unrevoked key with this hash and its live
	// owner (service.ErrNotFound otherwise) in one lookup.
	APIKeyByHash(ctx context.Context, hash []byte) (*service.APIKey, *service.User, error)
	// APIKeys lists unrevoked keys of userID (everyone's when 0) in id order.
	APIKeys(ctx context.Context, userID, after service.ID, limit int) ([]*service.APIKey, error)
	APIKeyByID(ctx context.Context, id service.ID) (*service.APIKey, error)
	RevokeAPIKey(ctx context.Context, id service.ID) error
	// TouchAPIKey sets last-used to at unless it is already notBefore or later.
	TouchAPIKey(ctx context.Context, id service.ID, at, notBefore time.Time) error
}

// KeyAccess checks that a principal may read the knowledge bases a new key
// is limited to (service.Access).
type KeyAccess interface {
	CheckReadable(ctx context.Context, p service.Principal, ids []service.ID) error
}

const (
	keyRandomBytes  = 32 // entropy of a key
	keyPrefixLen    = 10 // "rk_" and 7 characters, shown in lists
	maxKeysPerUser  = 50
	maxKeyNameRunes = 100
	// touchEvery bounds how often a key's last-used time is written: a
	// busy key costs one write a minute, not one per request.
	touchEvery = time.Minute
)

// DefaultKeyMaxTTL is the longest life of an API key when Config.KeyMaxTTL
// is not set (RAGENT_API_KEY_MAX_TTL): a year.
const DefaultKeyMaxTTL = 365 * 24 * time.Hour

// APIKeys is the use case of API keys: machines act as a user with a key
// instead of a password. A key is checked against Postgres on every request
// (one indexed lookup joined with its owner, the same read a session does
// for its user row), so a revocation, a demotion or a disable takes effect
// on every instance at the next request.
type APIKeys struct {
	store  KeyStore
	access KeyAccess
	ids    service.IDGenerator
	audit  *service.Auditor // records every create and revoke, refused ones too
	maxTTL time.Duration
	now    func() time.Time
	log    *slog.Logger
	// failures counts failed authentications per client address; nil
	// counts none (LimitFailures).
	failures     *failures
	failureLimit int
}

// NewAPIKeys returns the API-key use case; every create and revoke is
// recorded in audit. Of cfg it reads KeyMaxTTL, Logger and Now, so it
// shares the sessions' Config.
func NewAPIKeys(store KeyStore, access KeyAccess, ids service.IDGenerator, audit *service.Auditor, cfg Config) *APIKeys {
	cfg = cfg.withClock()
	maxTTL := cfg.KeyMaxTTL
	if maxTTL <= 0 {
		maxTTL = DefaultKeyMaxTTL
	}
	return &APIKeys{store: store, access: access, ids: ids, audit: audit, maxTTL: maxTTL, now: cfg.Now, log: cfg.Logger}
}

// expiry is when k stops working: its own expiry, but never later than
// the longest life from its creation, so keys stored before the cap (or
// under a longer one) end too.
func (a *APIKeys) expiry(k *service.APIKey) time.Time {
	limit := k.CreatedAt.Add(a.maxTTL)
	if k.ExpiresAt != nil && k.ExpiresAt.Before(limit) {
		return *k.ExpiresAt
	}
	return limit
}

// capExpiry shows keys with the expiry they have in force.
func (a *APIKeys) capExpiry(keys []*service.APIKey) []*service.APIKey {
	for _, k := range keys {
		at := a.expiry(k)
		k.ExpiresAt = &at
	}
	return keys
}

// LimitFailures bounds failed authentications (unknown, revoked or expired
// keys) from one client address (an IPv6 /64) to cfg.MaxClientFailures per
// cfg.FailWindow, in counters of their own beside the logins' (falling back
// to this instance's memory while attempts cannot be reached). Past the
// limit every key from that address is refused with service.ErrBusy until
// the window ends: the lookup is refused before it is made.
func (a *APIKeys) LimitFailures(attempts Attempts, cfg Config) {
	cfg = cfg.withClock()
	cfg.FailWindow = cmp.Or(max(cfg.FailWindow, 0), 15*time.Minute)
	a.failures, a.failureLimit = newFailures(attempts, cfg), cmp.Or(max(cfg.MaxClientFailures, 0), 100)
}

// KeyInput creates an API key.
type KeyInput struct {
	Name   string          `json:"name"`
	Scopes []service.Scope `json:"scopes"`
	// KnowledgeBaseIDs limits the key; omitted (null) means every knowledge
	// base the owner may read, now and later.
	KnowledgeBaseIDs []service.ID `json:"knowledgeBaseIds"`
	// ExpiresAt is at most the longest life (Config.KeyMaxTTL) away;
	// omitted means that longest life.
	ExpiresAt *time.Time `json:"expiresAt"`
}

// CreatedKey is a new key with its secret, which is returned only here.
type CreatedKey struct {
	*service.APIKey
	Key string `json:"key"`
}

// Create issues a key for the caller. A key cannot create keys, and can
// name only knowledge bases its owner reads now (others are
// service.ErrNotFound, as everywhere).
func (a *APIKeys) Create(ctx context.Context, p service.Principal, in KeyInput) (*CreatedKey, error) {
	check := func(ctx context.Context) (*service.APIKey, error) { return a.validate(ctx, p, in) }
	detail := func(k *service.APIKey) string { return "scopes=" + joinScopes(k.Scopes) }
	return a.issue(ctx, p, "api key", service.APIKeyPrefix, check, detail)
}

// issue makes, stores and audits a new key of the caller's: check returns
// it validated (with its kind and settings), prefix starts its secret,
// detail ends the audit event's detail, what names it in the log.
func (a *APIKeys) issue(ctx context.Context, p service.Principal, what, prefix string,
	check func(context.Context) (*service.APIKey, error), detail func(*service.APIKey) string) (*CreatedKey, error) {
	var created *CreatedKey
	ev := service.AuditEvent{Action: service.AuditAPIKeyCreate, TargetType: service.TargetAPIKey}
	err := a.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		if p.Key != nil {
			return service.Errorf(service.ErrForbidden, "an API key cannot manage API keys")
		}
		k, err := check(ctx)
		if err != nil {
			return err
		}
		secret, err := newKey(prefix)
		if err != nil {
			return err
		}
		if k.ID, err = a.ids.NextID(); err != nil {
			return err
		}
		sum := sha256.Sum256([]byte(secret))
		k.Hash, k.Prefix = sum[:], secret[:keyPrefixLen]
		k.CreatedAt = a.now() // the store may keep its own clock's
		if err := a.store.CreateAPIKey(ctx, k, maxKeysPerUser); err != nil {
			return err
		}
		// The prefix identifies the key in the log; the secret never leaves
		// this function but in the one response.
		ev.TargetID, ev.Detail = k.ID.String(), "prefix="+k.Prefix+" "+detail(k)
		created = &CreatedKey{APIKey: k, Key: secret}
		return nil
	})
	if err != nil {
		return nil, err
	}
	a.log.InfoContext(ctx, what+" created", "key", created.ID, "user", p.UserID, "prefix", created.Prefix)
	return created, nil
}

func joinScopes(scopes []service.Scope) string {
	parts := make([]string, len(scopes))
	for i, s := range scopes {
		parts[i] = string(s)
	}
	return strings.Join(parts, ",")
}

func (a *APIKeys) validate(ctx context.Context, p service.Principal, in KeyInput) (*service.APIKey, error) {
	name := strings.TrimSpace(in.Name)
	if name == "" || utf8.RuneCountInString(name) > maxKeyNameRunes {
		return nil, service.WithDetails(service.ErrInvalid, "name is required (at most 100 characters)", map[string]string{"field": "name"})
	}
	if len(in.Scopes) == 0 {
		return nil, service.WithDetails(service.ErrInvalid, "at least one scope is required (read, search, chat, ingest)", map[string]string{"field": "scopes"})
	}
	var scopes []service.Scope
	for _, s := range in.Scopes {
		if !s.Valid() {
			return nil, service.WithDetails(service.ErrInvalid, "unknown scope "+string(s)+" (read, search, chat, ingest)", map[string]string{"field": "scopes"})
		}
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	var kbs []service.ID
	if in.KnowledgeBaseIDs != nil {
		if len(in.KnowledgeBaseIDs) == 0 {
			return nil, service.WithDetails(service.ErrInvalid, "knowledgeBaseIds must name at least one knowledge base, or be left out for all", map[string]string{"field": "knowledgeBaseIds"})
		}
		kbs = []service.ID{}
		for _, id := range in.KnowledgeBaseIDs {
			if !slices.Contains(kbs, id) {
				kbs = append(kbs, id)
			}
		}
		if err := a.access.CheckReadable(ctx, p, kbs); err != nil {
			return nil, err
		}
	}
	now := a.now()
	expires := now.Add(a.maxTTL)
	switch {
	case in.ExpiresAt == nil:
	case !in.ExpiresAt.After(now):
		return nil, service.WithDetails(service.ErrInvalid, "expiresAt must be in the future", map[string]string{"field": "expiresAt"})
	case in.ExpiresAt.After(expires):
		return nil, service.WithDetails(service.ErrInvalid, fmt.Sprintf("expiresAt must be at most %s from now (%s); leave it out for that",
			durationText(a.maxTTL), expires.UTC().Format(time.RFC3339)), map[string]string{"field": "expiresAt"})
	default:
		expires = *in.ExpiresAt
	}
	return &service.APIKey{
		UserID: p.UserID, Username: p.Username, Name: name, Scopes: scopes,
		KnowledgeBaseIDs: kbs, ExpiresAt: &expires,
	}, nil
}

// base62 is the key alphabet: letters and digits survive every shell,
// URL and config format without quoting.
const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newKey returns "rk_" and 32 random bytes in base62 (43 characters, left
// padded so every key has the same length).
func newKey(prefix string) (string, error) {
	var b [keyRandomBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	n := new(big.Int).SetBytes(b[:])
	digits := make([]byte, 0, 43)
	base, mod := big.NewInt(62), new(big.Int)
	for n.Sign() > 0 {
		n.DivMod(n, base, mod)
		digits = append(digits, base62[mod.Int64()])
	}
	for len(digits) < 43 {
		digits = append(digits, base62[0])
	}
	slices.Reverse(digits)
	return prefix + string(digits), nil
}

var errBadKey = service.Errorf(service.ErrUnauthenticated, "invalid, expired or revoked API key")

// Authenticate returns the principal of an API key: its owner as the owner
// is now (role read from the user row), narrowed by the key's scopes and
// knowledge bases. Unknown, revoked and expired keys, and keys of disabled or
// deleted owners, are service.ErrUnauthenticated, all with one message.
func (a *APIKeys) Authenticate(ctx context.Context, key string) (service.Principal, error) {
	if a.failures == nil {
		return a.authenticate(ctx, key)
	}
	held, wait := a.failures.reserve(ctx, []Counter{{Group: "key-ip:" + clientKey(service.ClientIP(ctx)), Limit: a.failureLimit}})
	if wait > 0 {
		return service.Principal{}, busy(wait, "too many failed API-key authentications from this address; try again later")
	}
	p, err := a.authenticate(ctx, key)
	if err == nil || !errors.Is(err, service.ErrUnauthenticated) {
		// Only a refused key stays counted.
		a.failures.release(ctx, held, false)
	}
	return p, err
}

func (a *APIKeys) authenticate(ctx context.Context, key string) (service.Principal, error) {
	if !strings.HasPrefix(key, service.APIKeyPrefix) {
		return service.Principal{}, errBadKey
	}
	sum := sha256.Sum256([]byte(key))
	k, owner, err := a.store.APIKeyByHash(ctx, sum[:])
	if errors.Is(err, service.ErrNotFound) {
		return service.Principal{}, errBadKey
	}
	if err != nil {
		return service.Principal{}, err
	}
	now := a.now()
	expires := a.expiry(k)
	if owner.Disabled || !now.Before(expires) || k.Kind == service.KeyKindWidget {
		return service.Principal{}, errBadKey
	}
	if k.LastUsedAt == nil || now.Sub(*k.LastUsedAt) >= touchEvery {
		// Losing this write loses only a last-used time: log and serve.
		if err := a.store.TouchAPIKey(ctx, k.ID, now, now.Add(-touchEvery)); err != nil {
			a.log.WarnContext(ctx, "api key last-used time not recorded", "key", k.ID, "err", err)
		}
	}
	p := service.Principal{
		UserID: owner.ID, Username: owner.Username, Role: owner.Role, TokenID: "key:" + k.ID.String(),
		Key: &service.KeyGrant{KeyID: k.ID, Scopes: k.Scopes, KnowledgeBaseIDs: k.KnowledgeBaseIDs},
	}
	p.Expires = expires
	return p, nil
}

// List returns the caller's keys; an admin's list holds every user's.
func (a *APIKeys) List(ctx context.Context, p service.Principal, after service.ID, limit int) ([]*service.APIKey, error) {
	if p.Key != nil {
		return nil, service.Errorf(service.ErrForbidden, "an API key cannot manage API keys")
	}
	owner := p.UserID
	if p.IsAdmin() {
		owner = 0
	}
	keys, err := a.store.APIKeys(ctx, owner, after, limit)
	return a.capExpiry(keys), err
}

// durationText writes whole days as days ("365 days"), else as Go does.
func durationText(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}

// Revoke ends a key at once on every instance. Users revoke their own
// keys, admins anyone's; another user's key is service.ErrNotFound.
func (a *APIKeys) Revoke(ctx context.Context, p service.Principal, id service.ID) error {
	var owner service.ID
	ev := service.AuditEvent{Action: service.AuditAPIKeyRevoke, TargetType: service.TargetAPIKey, TargetID: id.String()}
	err := a.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		if p.Key != nil {
			return service.Errorf(service.ErrForbidden, "an API key cannot manage API keys")
		}
		k, err := a.store.APIKeyByID(ctx, id)
		if err != nil {
			return err
		}
		if k.UserID != p.UserID && !p.IsAdmin() {
			return service.Errorf(service.ErrNotFound, "API key %s not found", id)
		}
		owner, ev.Detail = k.UserID, "prefix="+k.Prefix
		return a.store.RevokeAPIKey(ctx, id)
	})
	if err != nil {
		return err
	}
	a.log.InfoContext(ctx, "api key revoked", "key", id, "owner", owner, "by", p.UserID)
	return nil
}
