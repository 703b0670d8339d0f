package api

import (
	"net/http"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service/auth"
)

// OIDCStateCookie binds a single sign-on login to the browser that started
// it: the state of the login in flight, sent only to the callback's path.
const OIDCStateCookie = "ragent_oidc_state"

// oidcPath is the path the state cookie is scoped to.
const oidcPath = "/api/v1/auth/oidc/"

// SSOInfo is what the login page shows (GET /api/v1/auth/providers).
type SSOInfo struct {
	// PasswordLogin is false when only the break-glass admin may use a password.
	PasswordLogin bool `json:"passwordLogin"`
	// SSO is the provider's button, nil without single sign-on.
	SSO *SSOButton `json:"sso"`
}

// SSOButton is the "Sign in with …" button.
type SSOButton struct {
	Name     string `json:"name"`
	LoginURL string `json:"loginUrl"`
}

func (s *Server) authProviders(c *gin.Context) {
	info := SSOInfo{PasswordLogin: !s.deps.PasswordLoginOff}
	if s.deps.SSO != nil {
		info.SSO = &SSOButton{Name: s.deps.SSOName, LoginURL: "/api/v1/auth/oidc/login"}
	}
	c.JSON(http.StatusOK, info)
}

// oidcLogin starts a login: a redirect to the provider, and the state
// cookie. ?returnTo= is the UI route ("#/kb/…") to land on.
func (s *Server) oidcLogin(c *gin.Context) {
	if s.deps.SSO == nil {
		failCode(c, http.StatusNotFound, "not_found", "single sign-on is not configured")
		return
	}
	authURL, state, err := s.deps.SSO.Begin(c.Request.Context(), c.Query("returnTo"))
	if err != nil {
		fail(c, err)
		return
	}
	// Lax: the provider's redirect back is a top-level GET navigation from
	// another site, which Lax cookies go along with.
	http.SetCookie(c.Writer, &http.Cookie{
		Name: OIDCStateCookie, Value: state, Path: oidcPath, MaxAge: int((10 * time.Minute).Seconds()),
		Secure: s.deps.SecureCookie, HttpOnly: true, SameSite: http.SameSiteLaxMode,
	})
	c.Header("Cache-Control", "no-store")
	c.Redirect(http.StatusFound, authURL)
}

// oidcCallback finishes a login and redirects to the UI: with a session
// cookie, or to the login page with the reason in ?sso_error=.
func (s *Server) oidcCallback(c *gin.Context) {
	if s.deps.SSO == nil {
		failCode(c, http.StatusNotFound, "not_found", "single sign-on is not configured")
		return
	}
	bound, _ := c.Cookie(OIDCStateCookie)
	// The state is used whatever the outcome.
	http.SetCookie(c.Writer, &http.Cookie{Name: OIDCStateCookie, Value: "", Path: oidcPath, MaxAge: -1,
		Secure: s.deps.SecureCookie, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	c.Header("Cache-Control", "no-store")
	sess, returnTo, err := s.deps.SSO.Complete(c.Request.Context(), auth.Callback{
		State: c.Query("state"), Code: c.Query("code"), Error: c.Query("error"), ErrorDescription: c.Query("error_description"),
		BoundState: bound,
	})
	if err != nil {
		status, detail := classify(err)
		if status >= 500 {
			fail(c, err)
			return
		}
		c.Redirect(http.StatusSeeOther, "/?sso_error="+url.QueryEscape(detail.Message)+"#/login")
		return
	}
	s.setSessionCookie(c, sess.Token, time.Until(sess.Expires))
	if returnTo == "" {
		returnTo = "#/chat"
	}
	c.Redirect(http.StatusSeeOther, "/"+returnTo)
}

// logoutResponse tells the UI where to end the provider's session too.
type logoutResponse struct {
	LogoutURL string `json:"logoutUrl"`
}

// logout ends the caller's session; for a session from the identity
// provider it answers 200 with the provider's logout URL (RP-initiated
// logout), for which the UI navigates; otherwise 204.
func (s *Server) logout(c *gin.Context) {
	if s.deps.SSO == nil {
		s.endSessions(s.deps.Auth.Logout)(c)
		return
	}
	u, err := s.deps.SSO.Logout(c.Request.Context(), principal(c))
	if err != nil {
		fail(c, err)
		return
	}
	s.setSessionCookie(c, "", -time.Second)
	if u == "" {
		c.Status(http.StatusNoContent)
		return
	}
	c.JSON(http.StatusOK, logoutResponse{LogoutURL: u})
}
