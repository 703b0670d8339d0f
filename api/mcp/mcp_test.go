package mcp

import (
	"net/http/httptest"
	"testing"

	"github.com/ragent-go/ragent/api"
	"github.com/ragent-go/ragent/service"
)

// Every tool mirrors a route of api's scope table: a renamed route would
// otherwise refuse the tool to every key.
func TestToolRoutesHaveScopes(t *testing.T) {
	n := 0
	for name, route := range toolRoutes {
		if len(api.KeyScopes(route)) == 0 {
			t.Errorf("tool %s mirrors %q, which admits no API key", name, route)
		}
		n++
	}
	if n != 6 {
		t.Fatalf("%d tools in toolRoutes, want 6 (list_knowledge_bases, search, ask, get_document, get_chunk, feedback)", n)
	}
}

func TestAllowed(t *testing.T) {
	key := func(scopes ...service.Scope) service.Principal {
		return service.Principal{Key: &service.KeyGrant{Scopes: scopes}}
	}
	tests := []struct {
		p     service.Principal
		route string
		ok    bool
	}{
		{key(service.ScopeChat), toolRoutes["ask"], true},
		{key(service.ScopeRead, service.ScopeSearch), toolRoutes["ask"], false},
		{key(service.ScopeSearch), toolRoutes["search"], true},
		{key(service.ScopeRead), toolRoutes["search"], false},
		{key(service.ScopeRead), toolRoutes["get_chunk"], true},
		{key(service.ScopeChat), toolRoutes["get_document"], false},
	}
	for _, tt := range tests {
		if err := allowed(tt.p, tt.route); (err == nil) != tt.ok {
			t.Errorf("allowed(%v, %s) = %v, want ok=%v", tt.p.Key.Scopes, tt.route, err, tt.ok)
		}
	}
}

// Requests without an API key never reach the SDK.
func TestRefusedWithoutKey(t *testing.T) {
	h := New(Deps{}, Config{})
	for _, auth := range []string{"", "Basic abc", "Bearer ", "Bearer session-token"} {
		r := httptest.NewRequest("POST", "/mcp", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 401 || w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: %d %s", auth, w.Code, w.Body)
		}
	}
}
