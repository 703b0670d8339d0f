package api

import (
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// keyScopes is the one table of what an API key may call: route → the
// scopes any one of which admits it. A route absent from it is refused to
// every key (user and group management, passwords, logout, admin pages,
// knowledge-base settings and members, and the API-key routes themselves,
// so a key can never mint another). Service-level rules still apply after
// it: the owner's role and the key's knowledge bases (service.Access).
var keyScopes = map[string][]service.Scope{
	"GET /api/v1/knowledge-bases":                         {service.ScopeRead},
	"GET /api/v1/knowledge-bases/:id":                     {service.ScopeRead},
	"GET /api/v1/knowledge-bases/:id/documents":           {service.ScopeRead},
	"GET /api/v1/documents/:id":                           {service.ScopeRead},
	"GET /api/v1/documents/:id/chunks":                    {service.ScopeRead},
	"GET /api/v1/conversations":                           {service.ScopeRead, service.ScopeChat},
	"GET /api/v1/conversations/:id/messages":              {service.ScopeRead, service.ScopeChat},
	"POST /api/v1/search":                                 {service.ScopeSearch},
	"POST /api/v1/chat":                                   {service.ScopeChat},
	"POST /api/v1/chat/tasks/:taskId/stop":                {service.ScopeChat},
	"GET /api/v1/chat/tasks/:taskId/events":               {service.ScopeChat},
	"PATCH /api/v1/conversations/:id":                     {service.ScopeChat},
	"DELETE /api/v1/conversations/:id":                    {service.ScopeChat},
	"POST /api/v1/knowledge-bases/:id/documents":          {service.ScopeIngest},
	"POST /api/v1/documents/:id/reindex":                  {service.ScopeIngest},
	"POST /api/v1/documents/:id/chunks":                   {service.ScopeIngest},
	"POST /api/v1/knowledge-bases/:id/chunks":             {service.ScopeIngest},
	"PATCH /api/v1/chunks/:id":                            {service.ScopeIngest},
	"DELETE /api/v1/chunks/:id":                           {service.ScopeIngest},
	"GET /api/v1/chunks/:id/revisions":                    {service.ScopeIngest},
	"GET /api/v1/documents/:id/deleted-chunks":            {service.ScopeIngest},
	"POST /api/v1/chunks/:id/revisions/:revision/restore": {service.ScopeIngest},
	"POST /api/v1/messages/:id/feedback":                  {service.ScopeChat},
	"DELETE /api/v1/documents/:id":                        {service.ScopeIngest},
	"DELETE /api/v1/knowledge-bases/:id/documents":        {service.ScopeIngest},
	"POST /api/v1/knowledge-bases/:id/documents:import":   {service.ScopeIngest},
	"GET /v1/models":                                      {service.ScopeChat},
	"POST /v1/chat/completions":                           {service.ScopeChat},
}

// KeyScopes returns the scopes that admit an API key to route ("METHOD
// /path" as registered); none means keys are refused there.
func KeyScopes(route string) []service.Scope { return slices.Clone(keyScopes[route]) }

// keyAllowed checks an API-key principal against keyScopes for the matched
// route.
func keyAllowed(c *gin.Context, p service.Principal) error {
	need, ok := keyScopes[c.Request.Method+" "+c.FullPath()]
	if !ok {
		return service.Errorf(service.ErrForbidden, "API keys cannot use this route; sign in as a person")
	}
	for _, s := range need {
		if p.Key.HasScope(s) {
			return nil
		}
	}
	names := make([]string, len(need))
	for i, s := range need {
		names[i] = string(s)
	}
	return service.WithDetails(service.ErrForbidden, "this API key lacks the scope this route needs",
		map[string]string{"scope": strings.Join(names, "|")})
}

// authenticateKey authenticates an API key, checks its scope for the route
// and counts the request against the key's own rate limit.
func (s *Server) authenticateKey(c *gin.Context, key string) (service.Principal, error) {
	if s.deps.APIKeys == nil {
		return service.Principal{}, service.Errorf(service.ErrUnauthenticated, "API keys are not enabled")
	}
	p, err := s.deps.APIKeys.Authenticate(c.Request.Context(), key)
	if err != nil {
		return p, err
	}
	if err := keyAllowed(c, p); err != nil {
		return p, err
	}
	if s.deps.KeyRate != nil {
		ok, wait, err := s.deps.KeyRate.Allow(c.Request.Context(), p.Key.KeyID.String())
		switch {
		case err != nil:
			// Like the chat rate: the limit guards against floods, the fair
			// queue (with its own Redis policy) guards the model.
			logger(c).WarnContext(c.Request.Context(), "api key rate limit unavailable; request admitted", "key", p.Key.KeyID, "err", err)
		case !ok:
			return p, &service.Error{Kind: service.ErrBusy, RetryAfter: wait, Message: "this API key is over its request rate; slow down"}
		}
	}
	return p, nil
}
