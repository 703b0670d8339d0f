package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ragent-go/ragent/service"
)

// GroupStore keeps groups and their members.
type GroupStore interface {
	CreateGroup(ctx context.Context, g *service.Group) error
	Group(ctx context.Context, id service.ID) (*service.Group, error)
	Groups(ctx context.Context, after service.ID, limit int) ([]*service.Group, error)
	UpdateGroup(ctx context.Context, g *service.Group) error
	DeleteGroup(ctx context.Context, id service.ID) error
	GroupMembers(ctx context.Context, groupID service.ID) ([]*service.User, error)
	AddGroupMember(ctx context.Context, groupID, userID service.ID) error
	RemoveGroupMember(ctx context.Context, groupID, userID service.ID) error
	UserByID(ctx context.Context, id service.ID) (*service.User, error)
	UserByUsername(ctx context.Context, username string) (*service.User, error)
}

// Groups manages the groups knowledge bases are shared with. Groups are
// the admins' to manage; knowledge-base managers only grant them roles.
type Groups struct {
	store GroupStore
	ids   service.IDGenerator
	audit *service.Auditor
}

// NewGroups returns the group use case; every change is recorded in audit.
func NewGroups(store GroupStore, ids service.IDGenerator, audit *service.Auditor) *Groups {
	return &Groups{store: store, ids: ids, audit: audit}
}

// GroupInput creates or changes a group; nil fields keep their value.
type GroupInput struct {
	Name        *string `json:"name"`
	Description *string `json:"description"`
}

func (in GroupInput) apply(g *service.Group) error {
	if in.Name != nil {
		g.Name = strings.TrimSpace(*in.Name)
	}
	if in.Description != nil {
		g.Description = strings.TrimSpace(*in.Description)
	}
	if err := checkNamed(g.Name, g.Description); err != nil {
		return err
	}
	return nil
}

func requireAdmin(p service.Principal) error {
	if !p.IsAdmin() {
		return service.Errorf(service.ErrForbidden, "only admins manage groups")
	}
	return nil
}

// managedGroup refuses changes to a group the identity provider manages:
// its next login or re-check would undo them.
func managedGroup(g *service.Group) error {
	if g.ManagedBy != "" {
		return service.Errorf(service.ErrConflict, "group %q is managed by the identity provider; change it there", g.Name)
	}
	return nil
}

// editableGroup loads a group an admin may change.
func (s *Groups) editableGroup(ctx context.Context, id service.ID) (*service.Group, error) {
	g, err := s.store.Group(ctx, id)
	if err != nil {
		return nil, groupNotFound(err, id)
	}
	return g, managedGroup(g)
}

func groupNotFound(err error, id service.ID) error {
	if errors.Is(err, service.ErrNotFound) {
		return service.Errorf(service.ErrNotFound, "group %s not found", id)
	}
	return err
}

// Create adds a group.
func (s *Groups) Create(ctx context.Context, p service.Principal, in GroupInput) (*service.Group, error) {
	return service.AuditDo(ctx, s.audit, service.AuditEvent{Action: service.AuditGroupCreate, TargetType: service.TargetGroup},
		func(ctx context.Context, ev *service.AuditEvent) (*service.Group, error) {
			g, err := s.create(ctx, p, in)
			if err == nil {
				ev.TargetID, ev.Detail = g.ID.String(), "name="+g.Name
			}
			return g, err
		})
}

func (s *Groups) create(ctx context.Context, p service.Principal, in GroupInput) (*service.Group, error) {
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	g := &service.Group{}
	if err := in.apply(g); err != nil {
		return nil, err
	}
	id, err := s.ids.NextID()
	if err != nil {
		return nil, err
	}
	g.ID = id
	if err := s.store.CreateGroup(ctx, g); err != nil {
		return nil, nameTaken(err, "group", g.Name)
	}
	return g, nil
}

// List pages through groups.
func (s *Groups) List(ctx context.Context, p service.Principal, after service.ID, limit int) ([]*service.Group, error) {
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	return s.store.Groups(ctx, after, limit)
}

// Update renames or describes a group.
func (s *Groups) Update(ctx context.Context, p service.Principal, id service.ID, in GroupInput) (*service.Group, error) {
	return service.AuditDo(ctx, s.audit, service.AuditEvent{Action: service.AuditGroupUpdate, TargetType: service.TargetGroup, TargetID: id.String()},
		func(ctx context.Context, ev *service.AuditEvent) (*service.Group, error) {
			g, err := s.update(ctx, p, id, in)
			if err == nil {
				ev.Detail = "name=" + g.Name
			}
			return g, err
		})
}

func (s *Groups) update(ctx context.Context, p service.Principal, id service.ID, in GroupInput) (*service.Group, error) {
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	g, err := s.editableGroup(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := in.apply(g); err != nil {
		return nil, err
	}
	if err := s.store.UpdateGroup(ctx, g); err != nil {
		return nil, groupNotFound(nameTaken(err, "group", g.Name), id)
	}
	return g, nil
}

// Delete removes a group with its memberships and every grant it held.
func (s *Groups) Delete(ctx context.Context, p service.Principal, id service.ID) error {
	ev := service.AuditEvent{Action: service.AuditGroupDelete, TargetType: service.TargetGroup, TargetID: id.String()}
	return s.audit.Do(ctx, ev, func(ctx context.Context, _ *service.AuditEvent) error {
		if err := requireAdmin(p); err != nil {
			return err
		}
		if _, err := s.editableGroup(ctx, id); err != nil {
			return err
		}
		return groupNotFound(s.store.DeleteGroup(ctx, id), id)
	})
}

// Members lists a group's users.
func (s *Groups) Members(ctx context.Context, p service.Principal, id service.ID) ([]*service.User, error) {
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	if _, err := s.store.Group(ctx, id); err != nil {
		return nil, groupNotFound(err, id)
	}
	return s.store.GroupMembers(ctx, id)
}

// GroupMemberInput names a user by id or username.
type GroupMemberInput struct {
	UserID   service.ID `json:"userId"`
	Username string     `json:"username"`
}

// AddMember puts a user in a group (adding a member twice is fine) and
// returns the user.
func (s *Groups) AddMember(ctx context.Context, p service.Principal, id service.ID, in GroupMemberInput) (*service.User, error) {
	ev := service.AuditEvent{Action: service.AuditGroupMemberAdd, TargetType: service.TargetGroup, TargetID: id.String()}
	return service.AuditDo(ctx, s.audit, ev, func(ctx context.Context, ev *service.AuditEvent) (*service.User, error) {
		u, err := s.addMember(ctx, p, id, in)
		if err == nil {
			ev.Detail = fmt.Sprintf("user=%s (%s)", u.ID, u.Username)
		}
		return u, err
	})
}

func (s *Groups) addMember(ctx context.Context, p service.Principal, id service.ID, in GroupMemberInput) (*service.User, error) {
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	if _, err := s.editableGroup(ctx, id); err != nil {
		return nil, err
	}
	name := strings.TrimSpace(in.Username)
	if in.UserID == 0 && name == "" {
		return nil, service.Errorf(service.ErrInvalid, "userId or username is required")
	}
	u, err := byIDOrName(ctx, in.UserID, name, "user", s.store.UserByID, s.store.UserByUsername)
	if err != nil {
		return nil, err
	}
	if err := s.store.AddGroupMember(ctx, id, u.ID); err != nil {
		return nil, err
	}
	return u, nil
}

// RemoveMember takes a user out of a group.
func (s *Groups) RemoveMember(ctx context.Context, p service.Principal, id, userID service.ID) error {
	ev := service.AuditEvent{Action: service.AuditGroupMemberRemove, TargetType: service.TargetGroup, TargetID: id.String(),
		Detail: "user=" + userID.String()}
	return s.audit.Do(ctx, ev, func(ctx context.Context, _ *service.AuditEvent) error {
		if err := requireAdmin(p); err != nil {
			return err
		}
		if _, err := s.editableGroup(ctx, id); err != nil {
			return err
		}
		err := s.store.RemoveGroupMember(ctx, id, userID)
		if errors.Is(err, service.ErrNotFound) {
			return service.Errorf(service.ErrNotFound, "user %s is not in group %s", userID, id)
		}
		return err
	})
}
