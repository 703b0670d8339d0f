package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"

	"github.com/ragent-go/ragent/service"
)

// Widget-key bounds: a page's widget names a handful of origins; its rates
// are chats per minute.
const (
	maxWidgetOrigins   = 20
	maxWidgetRate      = 10000
	defaultOriginRate  = 60
	defaultVisitorRate = 10
)

// WidgetInput creates a widget key (docs/widget.md).
type WidgetInput struct {
	Name string `json:"name"`
	// KnowledgeBaseIDs are required: a widget answers from these only.
	KnowledgeBaseIDs []service.ID `json:"knowledgeBaseIds"`
	Origins          []string     `json:"origins"`
	OriginRate       int          `json:"originRate"`  // 0: 60 a minute
	VisitorRate      int          `json:"visitorRate"` // 0: 10 a minute
}

// CreateWidget issues a public widget key for the caller, an admin: it
// lets anonymous visitors of the named origins chat with the named
// knowledge bases (those the admin reads), so it is an admin's decision
// like sharing a knowledge base. Its only scope is chat.
func (a *APIKeys) CreateWidget(ctx context.Context, p service.Principal, in WidgetInput) (*CreatedKey, error) {
	check := func(ctx context.Context) (*service.APIKey, error) {
		if !p.IsAdmin() {
			return nil, service.Errorf(service.ErrForbidden, "only admins create widget keys")
		}
		w, err := widgetSettings(in)
		if err != nil {
			return nil, err
		}
		if len(in.KnowledgeBaseIDs) == 0 {
			return nil, service.WithDetails(service.ErrInvalid, "a widget key must name at least one knowledge base", map[string]string{"field": "knowledgeBaseIds"})
		}
		k, err := a.validate(ctx, p, KeyInput{Name: in.Name, Scopes: []service.Scope{service.ScopeChat}, KnowledgeBaseIDs: in.KnowledgeBaseIDs})
		if err != nil {
			return nil, err
		}
		k.Kind, k.Widget = service.KeyKindWidget, w
		return k, nil
	}
	detail := func(k *service.APIKey) string { return "widget origins=" + strings.Join(k.Widget.Origins, ",") }
	return a.issue(ctx, p, "widget key", service.WidgetKeyPrefix, check, detail)
}

func widgetSettings(in WidgetInput) (*service.WidgetSettings, error) {
	w := &service.WidgetSettings{OriginRate: in.OriginRate, VisitorRate: in.VisitorRate}
	if len(in.Origins) == 0 || len(in.Origins) > maxWidgetOrigins {
		return nil, service.WithDetails(service.ErrInvalid, "a widget key needs 1 to 20 allowed origins (https://host[:port])", map[string]string{"field": "origins"})
	}
	for _, o := range in.Origins {
		n, ok := service.NormalizeOrigin(o)
		if !ok {
			return nil, service.WithDetails(service.ErrInvalid, "origin "+o+" is not scheme://host[:port] (http or https, no path)", map[string]string{"field": "origins"})
		}
		if !slices.Contains(w.Origins, n) {
			w.Origins = append(w.Origins, n)
		}
	}
	for _, r := range []*int{&w.OriginRate, &w.VisitorRate} {
		if *r < 0 || *r > maxWidgetRate {
			return nil, service.WithDetails(service.ErrInvalid, "widget rates are chats per minute, 1 to 10000 (0 for the default)", map[string]string{"field": "rates"})
		}
	}
	if w.OriginRate == 0 {
		w.OriginRate = defaultOriginRate
	}
	if w.VisitorRate == 0 {
		w.VisitorRate = defaultVisitorRate
	}
	return w, nil
}

// A widget's refusals are read by the refused page (docs/security.md), so
// their messages are fixed: they say what failed, nothing about the key.
var (
	errBadWidgetKey = service.Errorf(service.ErrUnauthenticated, "invalid, expired or revoked widget key")
	errWidgetOrigin = service.Errorf(service.ErrForbidden, "this widget key does not serve pages of this origin")
)

// Widget is an authenticated widget request: the visitor's principal and
// the key's settings (its rates are the caller's to apply).
type Widget struct {
	Principal service.Principal
	Settings  service.WidgetSettings
}

// AuthenticateWidget checks a widget key from a page at origin (the
// request's Origin header) for visitor (the id the widget keeps,
// service.ValidVisitorID). The principal is the key's owner narrowed to
// chat and the key's knowledge bases, with the visitor as its actor
// (Principal.Visitor). An origin the key does not list is
// service.ErrForbidden, checked before the visitor id; failures count like
// API keys' (LimitFailures).
func (a *APIKeys) AuthenticateWidget(ctx context.Context, key, origin, visitor string) (Widget, error) {
	if a.failures == nil {
		return a.authenticateWidget(ctx, key, origin, visitor)
	}
	held, wait := a.failures.reserve(ctx, []Counter{{Group: "key-ip:" + clientKey(service.ClientIP(ctx)), Limit: a.failureLimit}})
	if wait > 0 {
		return Widget{}, busy(wait, "too many failed key authentications from this address; try again later")
	}
	w, err := a.authenticateWidget(ctx, key, origin, visitor)
	if err == nil || !errors.Is(err, service.ErrUnauthenticated) {
		a.failures.release(ctx, held, false)
	}
	return w, err
}

func (a *APIKeys) authenticateWidget(ctx context.Context, key, origin, visitor string) (Widget, error) {
	if !strings.HasPrefix(key, service.WidgetKeyPrefix) {
		return Widget{}, errBadWidgetKey
	}
	sum := sha256.Sum256([]byte(key))
	k, owner, err := a.store.APIKeyByHash(ctx, sum[:])
	if errors.Is(err, service.ErrNotFound) {
		return Widget{}, errBadWidgetKey
	}
	if err != nil {
		return Widget{}, err
	}
	now := a.now()
	expires := a.expiry(k)
	if owner.Disabled || !now.Before(expires) || k.Kind != service.KeyKindWidget || k.Widget == nil {
		return Widget{}, errBadWidgetKey
	}
	if o, ok := service.NormalizeOrigin(origin); !ok || !slices.Contains(k.Widget.Origins, o) {
		return Widget{}, errWidgetOrigin
	}
	// After the origin: a page the key does not serve learns that first,
	// whatever it sends (the widget's probe names no visitor).
	if !service.ValidVisitorID(visitor) {
		return Widget{}, service.Errorf(service.ErrInvalid, "the visitor id must be 16 to 64 characters of letters, digits, '-' and '_'")
	}
	if k.LastUsedAt == nil || now.Sub(*k.LastUsedAt) >= touchEvery {
		if err := a.store.TouchAPIKey(ctx, k.ID, now, now.Add(-touchEvery)); err != nil {
			a.log.WarnContext(ctx, "widget key last-used time not recorded", "key", k.ID, "err", err)
		}
	}
	p := service.Principal{
		UserID: owner.ID, Username: owner.Username, Role: owner.Role, TokenID: "key:" + k.ID.String(),
		Key:     &service.KeyGrant{KeyID: k.ID, Scopes: []service.Scope{service.ScopeChat}, KnowledgeBaseIDs: k.KnowledgeBaseIDs},
		Visitor: "w:" + k.ID.String() + ":" + visitor, Expires: expires,
	}
	return Widget{Principal: p, Settings: *k.Widget}, nil
}
