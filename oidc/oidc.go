// Package oidc is the OpenID Connect relying party: discovery, the
// authorization code flow with PKCE (S256), ID token verification and the
// refresh the re-check makes, on github.com/coreos/go-oidc/v3 and
// golang.org/x/oauth2 (docs/sso.md).
//
// Discovery is lazy: the first login (or re-check) asks the issuer, and a
// failed discovery is tried again at the next one, so ragent starts while
// the provider is down. ID tokens are verified for issuer, audience (the
// client id), expiry and signature; the signing keys come from the
// provider's JWKS, fetched again when a token names a key not seen yet, so
// the provider may rotate keys at any time.
package oidc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/ragent-go/ragent/service"
)

// Config is the relying party's registration at the provider.
type Config struct {
	Issuer        string
	ClientID      string
	ClientSecret  string
	RedirectURL   string
	Scopes        []string // "openid" is added when missing
	UsernameClaim string   // default preferred_username
	GroupsClaim   string   // "" reads no groups
	// PostLogoutRedirectURL is where the provider sends the browser after
	// RP-initiated logout.
	PostLogoutRedirectURL string
	// HTTPClient talks to the provider; nil is a client with a 10 s timeout.
	HTTPClient *http.Client
}

// Provider is one OpenID Connect provider.
type Provider struct {
	cfg    Config
	client *http.Client

	mu         sync.Mutex
	provider   *gooidc.Provider // nil until discovered
	verifier   *gooidc.IDTokenVerifier
	oauth      oauth2.Config
	endSession string
}

// maxGroups bounds the groups read from one token; a token with more is
// refused rather than half-applied.
const maxGroups = 500

// New checks cfg; it makes no network call.
func New(cfg Config) (*Provider, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" || cfg.RedirectURL == "" {
		return nil, errors.New("oidc: issuer, client id and redirect URL are required")
	}
	if _, err := url.ParseRequestURI(cfg.RedirectURL); err != nil {
		return nil, fmt.Errorf("oidc: redirect URL: %w", err)
	}
	if cfg.UsernameClaim == "" {
		cfg.UsernameClaim = "preferred_username"
	}
	if !slices.Contains(cfg.Scopes, gooidc.ScopeOpenID) {
		cfg.Scopes = append([]string{gooidc.ScopeOpenID}, cfg.Scopes...)
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return &Provider{cfg: cfg, client: client}, nil
}

// ctx carries the HTTP client go-oidc and oauth2 use.
func (p *Provider) ctx(ctx context.Context) context.Context {
	ctx = gooidc.ClientContext(ctx, p.client)
	return context.WithValue(ctx, oauth2.HTTPClient, p.client)
}

// discover returns the provider's metadata, asking the issuer the first
// time (and again after a failure).
func (p *Provider) discover() (*gooidc.Provider, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.provider != nil {
		return p.provider, nil
	}
	// The key set keeps the context for its background fetches (go-oidc
	// drops its cancel), so only the client travels in it.
	dctx, cancel := context.WithTimeout(p.ctx(context.Background()), 15*time.Second)
	defer cancel()
	prov, err := gooidc.NewProvider(dctx, p.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: identity provider discovery: %v", service.ErrUnavailable, err)
	}
	var meta struct {
		EndSession string `json:"end_session_endpoint"`
	}
	if err := prov.Claims(&meta); err != nil {
		return nil, fmt.Errorf("%w: identity provider metadata: %v", service.ErrUnavailable, err)
	}
	p.provider = prov
	p.verifier = prov.Verifier(&gooidc.Config{ClientID: p.cfg.ClientID})
	p.oauth = oauth2.Config{
		ClientID: p.cfg.ClientID, ClientSecret: p.cfg.ClientSecret, RedirectURL: p.cfg.RedirectURL,
		Endpoint: prov.Endpoint(), Scopes: p.cfg.Scopes,
	}
	p.endSession = meta.EndSession
	return prov, nil
}

// AuthCodeURL is the provider's authorization URL for one login: the
// state, the nonce the ID token must carry, and the S256 challenge of the
// PKCE verifier.
func (p *Provider) AuthCodeURL(ctx context.Context, state, nonce, verifier string) (string, error) {
	if _, err := p.discover(); err != nil {
		return "", err
	}
	return p.oauth.AuthCodeURL(state, gooidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), nil
}

// Exchange redeems an authorization code with its PKCE verifier and
// returns the verified identity; the ID token must carry nonce. A code or
// token the provider or the verification refuses is
// service.ErrUnauthenticated; an unreachable provider service.ErrUnavailable.
func (p *Provider) Exchange(ctx context.Context, code, verifier, nonce string) (*service.Identity, error) {
	if _, err := p.discover(); err != nil {
		return nil, err
	}
	tok, err := p.oauth.Exchange(p.ctx(ctx), code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, tokenError("code exchange", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, service.Errorf(service.ErrUnauthenticated, "the identity provider returned no ID token")
	}
	idt, err := p.verifier.Verify(p.ctx(ctx), raw)
	if err != nil {
		return nil, service.Errorf(service.ErrUnauthenticated, "ID token refused: %v", err)
	}
	if idt.Nonce != nonce {
		return nil, service.Errorf(service.ErrUnauthenticated, "ID token refused: nonce does not match")
	}
	id, err := p.identity(idt.Issuer, idt.Subject, idt.Claims)
	if err != nil {
		return nil, err
	}
	id.RefreshToken, id.IDToken = tok.RefreshToken, raw
	return id, nil
}

// Refresh asks the provider whether the user still holds the session
// refreshToken belongs to, and who they are now: a refused refresh (the
// user was disabled or their provider session ended) is
// service.ErrUnauthenticated. The identity comes from the refreshed ID
// token, or from the userinfo endpoint when the provider sends none.
func (p *Provider) Refresh(ctx context.Context, refreshToken string) (*service.Identity, error) {
	prov, err := p.discover()
	if err != nil {
		return nil, err
	}
	if refreshToken == "" {
		return nil, service.Errorf(service.ErrUnauthenticated, "the identity provider issued no refresh token; sign in again")
	}
	tok, err := p.oauth.TokenSource(p.ctx(ctx), &oauth2.Token{RefreshToken: refreshToken}).Token()
	if err != nil {
		return nil, tokenError("refresh", err)
	}
	var id *service.Identity
	if raw, _ := tok.Extra("id_token").(string); raw != "" {
		idt, err := p.verifier.Verify(p.ctx(ctx), raw)
		if err != nil {
			return nil, service.Errorf(service.ErrUnauthenticated, "refreshed ID token refused: %v", err)
		}
		if id, err = p.identity(idt.Issuer, idt.Subject, idt.Claims); err != nil {
			return nil, err
		}
		id.IDToken = raw
	} else {
		info, err := prov.UserInfo(p.ctx(ctx), oauth2.StaticTokenSource(tok))
		if err != nil {
			return nil, fmt.Errorf("%w: userinfo: %v", service.ErrUnavailable, err)
		}
		if id, err = p.identity(p.cfg.Issuer, info.Subject, info.Claims); err != nil {
			return nil, err
		}
	}
	id.RefreshToken = cmpOr(tok.RefreshToken, refreshToken)
	return id, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// EndSessionURL is the provider's RP-initiated logout URL for a session
// whose ID token was idToken, or "" when the provider offers none.
func (p *Provider) EndSessionURL(ctx context.Context, idToken string) (string, error) {
	if _, err := p.discover(); err != nil {
		return "", err
	}
	if p.endSession == "" {
		return "", nil
	}
	u, err := url.Parse(p.endSession)
	if err != nil {
		return "", fmt.Errorf("oidc: end_session_endpoint: %w", err)
	}
	q := u.Query()
	q.Set("client_id", p.cfg.ClientID)
	if idToken != "" {
		q.Set("id_token_hint", idToken)
	}
	if p.cfg.PostLogoutRedirectURL != "" {
		q.Set("post_logout_redirect_uri", p.cfg.PostLogoutRedirectURL)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// identity reads the configured claims of a verified token or userinfo.
func (p *Provider) identity(issuer, subject string, claims func(any) error) (*service.Identity, error) {
	var all map[string]json.RawMessage
	if err := claims(&all); err != nil {
		return nil, service.Errorf(service.ErrUnauthenticated, "unreadable claims: %v", err)
	}
	if subject == "" {
		return nil, service.Errorf(service.ErrUnauthenticated, "the identity provider sent no subject")
	}
	id := &service.Identity{Issuer: issuer, Subject: subject}
	if raw, ok := all[p.cfg.UsernameClaim]; ok {
		if err := json.Unmarshal(raw, &id.Username); err != nil {
			return nil, service.Errorf(service.ErrUnauthenticated, "claim %s is not a string", p.cfg.UsernameClaim)
		}
	}
	if p.cfg.GroupsClaim == "" {
		return id, nil
	}
	raw, ok := all[p.cfg.GroupsClaim]
	if !ok {
		// Absent is no groups: Keycloak and others leave an empty list out.
		id.Groups = []string{}
		return id, nil
	}
	var groups []string
	if err := json.Unmarshal(raw, &groups); err != nil {
		var one string
		if json.Unmarshal(raw, &one) != nil {
			return nil, service.Errorf(service.ErrUnauthenticated, "claim %s is not a list of strings", p.cfg.GroupsClaim)
		}
		groups = []string{one}
	}
	if len(groups) > maxGroups {
		return nil, service.Errorf(service.ErrUnauthenticated, "claim %s lists %d groups, more than %d", p.cfg.GroupsClaim, len(groups), maxGroups)
	}
	id.Groups = groups
	return id, nil
}

// tokenError sorts an error of the token endpoint: the provider's refusal
// (an OAuth error answer, 4xx) is the user's; anything else is the
// provider's being unreachable.
func tokenError(what string, err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode >= 400 && re.Response.StatusCode < 500 {
		msg := re.ErrorCode
		if re.ErrorDescription != "" {
			msg += ": " + re.ErrorDescription
		}
		return service.Errorf(service.ErrUnauthenticated, "the identity provider refused the %s (%s)", what, strings.TrimSpace(msg))
	}
	return fmt.Errorf("%w: identity provider %s: %v", service.ErrUnavailable, what, err)
}
