package main

import (
	"strings"
	"testing"
)

// TestConfigOIDC: the single sign-on settings are checked at start, each
// refusal naming the variable.
func TestConfigOIDC(t *testing.T) {
	ok := []string{
		"RAGENT_OIDC_ISSUER", "https://idp.example.com/realms/x",
		"RAGENT_OIDC_CLIENT_ID", "ragent",
		"RAGENT_OIDC_REDIRECT_URL", "https://rag.example.com/api/v1/auth/oidc/callback",
	}
	c, err := loadConfig(envOf(ok...))
	if err != nil {
		t.Fatalf("valid SSO settings refused: %v", err)
	}
	if c.oidcPostLogoutURL() != "https://rag.example.com/" || c.OIDCRecheck.String() != "5m0s" || c.OIDCUsernameClaim != "preferred_username" ||
		c.OIDCGroupsClaim != "groups" || strings.Join(c.OIDCScopes, " ") != "openid profile email" || !c.PasswordLogin {
		t.Errorf("defaults: %+v", c)
	}
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"RAGENT_PASSWORD_LOGIN", "false"}, "RAGENT_PASSWORD_LOGIN=false needs single sign-on"},
		{[]string{"RAGENT_OIDC_CLIENT_ID", "x"}, "RAGENT_OIDC_CLIENT_ID is set but RAGENT_OIDC_ISSUER is not"},
		{[]string{"RAGENT_OIDC_ISSUER", "idp.example.com", "RAGENT_OIDC_CLIENT_ID", "x", "RAGENT_OIDC_REDIRECT_URL", "https://a/api/v1/auth/oidc/callback"}, "RAGENT_OIDC_ISSUER=\"idp.example.com\": must be an absolute"},
		{[]string{"RAGENT_OIDC_ISSUER", "https://idp", "RAGENT_OIDC_REDIRECT_URL", "https://a/api/v1/auth/oidc/callback"}, "RAGENT_OIDC_CLIENT_ID is required"},
		{[]string{"RAGENT_OIDC_ISSUER", "https://idp", "RAGENT_OIDC_CLIENT_ID", "x"}, "RAGENT_OIDC_REDIRECT_URL is required"},
		{append(slicesClone(ok), "RAGENT_OIDC_REDIRECT_URL", "https://a/callback"), "the path must be /api/v1/auth/oidc/callback"},
		{append(slicesClone(ok), "RAGENT_OIDC_RECHECK", "0s"), "RAGENT_OIDC_RECHECK=0s"},
		{append(slicesClone(ok), "RAGENT_OIDC_RECHECK", "48h"), "at most RAGENT_TOKEN_TTL"},
		{append(slicesClone(ok), "RAGENT_OIDC_GROUPS_CLAIM", " ", "RAGENT_OIDC_ADMIN_GROUPS", "admins"), ""},
		{append(slicesClone(ok), "RAGENT_OIDC_GROUPS_CLAIM", "none", "RAGENT_OIDC_ADMIN_GROUPS", "admins"), "RAGENT_OIDC_ADMIN_GROUPS needs RAGENT_OIDC_GROUPS_CLAIM"},
		{append(slicesClone(ok), "RAGENT_OIDC_POST_LOGOUT_URL", "/relative"), "RAGENT_OIDC_POST_LOGOUT_URL=\"/relative\""},
		{append(slicesClone(ok), "RAGENT_PASSWORD_LOGIN", "maybe"), "RAGENT_PASSWORD_LOGIN"},
	} {
		_, err := loadConfig(envOf(tt.env...))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%v: %v", tt.env, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%v: error %v, want one containing %q", tt.env, err, tt.want)
		}
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
