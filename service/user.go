package service

import "time"

// Role decides what a user may do.
type Role string

const (
	RoleAdmin Role = "admin"
	RoleUser  Role = "user"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r == RoleAdmin || r == RoleUser }

// User is a person who logs in.
type User struct {
	ID           ID     `json:"id"`
	Username     string `json:"username"`
	PasswordHash string `json:"-"`
	Role         Role   `json:"role"`
	Disabled     bool   `json:"disabled"`
	TokenVersion int64  `json:"-"` // bumped to end every session issued before
	// OIDCIssuer and OIDCSubject name the user at the identity provider
	// that created them (docs/sso.md); empty for local users.
	OIDCIssuer  string `json:"-"`
	OIDCSubject string `json:"-"`
	// SSO is true for a user the identity provider manages: no password,
	// groups and (with RAGENT_OIDC_ADMIN_GROUPS) role follow the provider.
	SSO       bool      `json:"sso"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// IsAdmin reports whether u has the admin role.
func (u *User) IsAdmin() bool { return u != nil && u.Role == RoleAdmin }

// Principal is the authenticated caller of a request.
type Principal struct {
	UserID   ID
	Username string
	Role     Role
	TokenID  string    // identifies the token for revocation
	Expires  time.Time // when the token stops verifying
	// Key is set when the caller authenticated with an API key: the owner's
	// current role, narrowed by the key's scopes and knowledge bases.
	Key *KeyGrant
	// Visitor is set for an anonymous visitor of a chat widget (a widget
	// key, service.WidgetKeyPrefix): "w:<keyId>:<visitor id>". The visitor,
	// not the key's owner, is then who queues, is rate limited and owns the
	// turn (Actor); the owner only lends the key's knowledge bases.
	Visitor string
}

// Actor names who a chat turn belongs to: the fair queue's user, the
// chat rate's key, a task's owner. It is the user id, or a widget
// visitor's own identity, so every visitor of a widget is a user of its own
// and never reaches another's tasks.
func (p Principal) Actor() string {
	if p.Visitor != "" {
		return p.Visitor
	}
	return p.UserID.String()
}

// IsAdmin reports whether p has the admin role.
func (p Principal) IsAdmin() bool { return p.Role == RoleAdmin }

// OverridesOwnership reports whether p may reach other users' own things
// (read their conversations, stop their chats): admins signed in as
// people. An admin's API key keeps to its owner's own, since another
// user's answers may quote knowledge bases outside the key's list.
func (p Principal) OverridesOwnership() bool { return p.IsAdmin() && p.Key == nil }

// Identity is what an OpenID Connect provider says about a user at a login
// or a re-check: from a verified ID token (or, after a refresh without one,
// the userinfo endpoint).
type Identity struct {
	Issuer   string
	Subject  string
	Username string   // from the configured username claim
	Groups   []string // from the configured groups claim; nil when the claim is absent
	// RefreshToken and IDToken are kept for the re-check and the logout
	// hint; both may be empty.
	RefreshToken string
	IDToken      string
}

// OIDCLogin is a login in flight between the redirect to the provider and
// the callback.
type OIDCLogin struct {
	State    string
	Nonce    string
	Verifier string // the PKCE code verifier
	ReturnTo string // the UI route to land on
	Expires  time.Time
}

// OIDCSession is the provider's side of one ragent session.
type OIDCSession struct {
	TokenID      string
	UserID       ID
	RefreshToken string
	IDToken      string
	CheckedAt    time.Time // when the provider last confirmed the user
	Expires      time.Time // the ragent session's expiry
}
