package auth

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
	"golang.org/x/crypto/bcrypt"
)

// PasswordChange is a user's change of their own password.
type PasswordChange struct {
	OldPassword string `json:"oldPassword"`
	NewPassword string `json:"newPassword"`
}

// errWrongPassword is a 400, not a 401: the caller's session is valid, only
// the password they typed is not.
var errWrongPassword = service.WithDetails(service.ErrInvalid, "the current password is incorrect", map[string]string{"field": "oldPassword"})

// ChangePassword lets the caller change their own password. The old password
// is checked under the same attempt limits as a login (from ip), so this is no
// way around them. Every other session of the caller ends; the returned
// session replaces the caller's.
func (s *Service) ChangePassword(ctx context.Context, p service.Principal, in PasswordChange, ip string) (*Session, error) {
	ev := service.AuditEvent{Action: service.AuditPasswordChange, TargetType: service.TargetUser, TargetID: p.UserID.String()}
	return service.AuditDo(ctx, s.audit, ev, func(ctx context.Context, _ *service.AuditEvent) (*Session, error) {
		return s.changePassword(ctx, p, in, ip)
	})
}

func (s *Service) changePassword(ctx context.Context, p service.Principal, in PasswordChange, ip string) (*Session, error) {
	if in.OldPassword == "" {
		return nil, service.WithDetails(service.ErrInvalid, "the current password is required", map[string]string{"field": "oldPassword"})
	}
	if err := s.validPassword(in.NewPassword); err != nil {
		return nil, err
	}
	if in.NewPassword == in.OldPassword {
		return nil, service.WithDetails(service.ErrInvalid, "the new password must differ from the current one", map[string]string{"field": "newPassword"})
	}
	u, err := s.store.UserByID(ctx, p.UserID)
	if err != nil {
		return nil, err
	}
	if len(in.OldPassword) > maxPasswordBytes {
		return nil, errWrongPassword // no stored password is longer
	}
	held, wait := s.attempts.reserve(ctx, s.accountCounters(u.Username, ip))
	if wait > 0 {
		return nil, busy(wait, "too many wrong passwords; try again later")
	}
	if s.compare([]byte(u.PasswordHash), []byte(in.OldPassword)) != nil {
		return nil, errWrongPassword
	}
	s.attempts.release(ctx, held, true)
	hash, err := s.hash(in.NewPassword)
	if err != nil {
		return nil, err
	}
	version, err := s.store.SetPassword(ctx, u.ID, hash)
	if errors.Is(err, service.ErrNotFound) {
		// Disabled or deleted since this request was authenticated.
		return nil, service.Errorf(service.ErrUnauthenticated, "account is disabled or deleted")
	}
	if err != nil {
		return nil, err
	}
	u.PasswordHash, u.TokenVersion = hash, version
	return s.session(u)
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
	ev := service.AuditEvent{Action: service.AuditUserCreate, TargetType: service.TargetUser}
	if in.Username != nil {
		ev.Detail = "username=" + strings.TrimSpace(*in.Username)
	}
	return service.AuditDo(ctx, s.audit, ev, func(ctx context.Context, ev *service.AuditEvent) (*service.User, error) {
		u, err := s.createUser(ctx, p, in)
		if err == nil {
			ev.TargetID, ev.Detail = u.ID.String(), fmt.Sprintf("username=%s role=%s disabled=%t", u.Username, u.Role, u.Disabled)
		}
		return u, err
	})
}

func (s *Service) createUser(ctx context.Context, p service.Principal, in UserInput) (*service.User, error) {
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
	if n := utf8.RuneCountInString(name); n < 2 || n > maxUsernameRunes {
		return service.Errorf(service.ErrInvalid, "username must be 2 to %d characters", maxUsernameRunes)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return service.Errorf(service.ErrInvalid, "username must not contain spaces or control characters")
		}
	}
	return nil
}

func (s *Service) validPassword(password string) error {
	if len([]rune(password)) < s.cfg.MinPassword {
		return service.Errorf(service.ErrInvalid, "password must be at least %d characters", s.cfg.MinPassword)
	}
	if len(password) > maxPasswordBytes {
		return service.Errorf(service.ErrInvalid, "password must be at most %d bytes", maxPasswordBytes)
	}
	return nil
}

func (s *Service) hash(password string) (string, error) {
	if err := s.validPassword(password); err != nil {
		return "", err
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
// A new password, a disable and a role change end the user's sessions.
func (s *Service) UpdateUser(ctx context.Context, p service.Principal, id service.ID, in UserInput) (*service.User, error) {
	ev := service.AuditEvent{Action: service.AuditUserUpdate, TargetType: service.TargetUser, TargetID: id.String(), Detail: in.changes()}
	return service.AuditDo(ctx, s.audit, ev, func(ctx context.Context, _ *service.AuditEvent) (*service.User, error) {
		return s.updateUser(ctx, p, id, in)
	})
}

// changes names what in changes, for the audit log (never the password).
func (in UserInput) changes() string {
	var parts []string
	if in.Role != nil {
		parts = append(parts, "role="+string(*in.Role))
	}
	if in.Disabled != nil {
		parts = append(parts, "disabled="+strconv.FormatBool(*in.Disabled))
	}
	if in.Password != nil {
		parts = append(parts, "password")
	}
	return strings.Join(parts, " ")
}

func (s *Service) updateUser(ctx context.Context, p service.Principal, id service.ID, in UserInput) (*service.User, error) {
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
	endSessions := false
	if in.Role != nil {
		if !in.Role.Valid() {
			return nil, service.Errorf(service.ErrInvalid, "role must be admin or user")
		}
		if id == p.UserID && *in.Role != service.RoleAdmin {
			return nil, service.Errorf(service.ErrConflict, "you cannot remove your own admin role")
		}
		endSessions = endSessions || u.Role != *in.Role
		u.Role = *in.Role
	}
	if in.Disabled != nil {
		if id == p.UserID && *in.Disabled {
			return nil, service.Errorf(service.ErrConflict, "you cannot disable yourself")
		}
		endSessions = endSessions || (*in.Disabled && !u.Disabled)
		u.Disabled = *in.Disabled
	}
	if in.Password != nil {
		if u.SSO {
			return nil, service.Errorf(service.ErrConflict, "%s signs in through the identity provider and has no password here", u.Username)
		}
		if u.PasswordHash, err = s.hash(*in.Password); err != nil {
			return nil, err
		}
		endSessions = true
	}
	if err := s.store.UpdateUser(ctx, u, endSessions); err != nil {
		return nil, err
	}
	return u, nil
}

// DeleteUser removes a user (admins only; not themself).
func (s *Service) DeleteUser(ctx context.Context, p service.Principal, id service.ID) error {
	ev := service.AuditEvent{Action: service.AuditUserDelete, TargetType: service.TargetUser, TargetID: id.String()}
	return s.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		if !p.IsAdmin() {
			return service.ErrForbidden
		}
		if id == p.UserID {
			return service.Errorf(service.ErrConflict, "you cannot delete yourself")
		}
		u, err := s.store.UserByID(ctx, id)
		if err != nil {
			return err
		}
		ev.Detail = "username=" + u.Username
		return s.store.DeleteUser(ctx, id)
	})
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
