package repository

import (
	"context"

	"time"

	"github.com/ragent-go/ragent/service"
)

// KnowledgeBaseGrants returns, for each live knowledge base (of kbIDs, or
// all when nil), its visibility and the highest role granted to the user
// directly or through any of their groups, in one query.
func (s *Store) KnowledgeBaseGrants(ctx context.Context, userID service.ID, kbIDs []service.ID) ([]service.KBGrant, error) {
	var rows []struct {
		ID         int64
		Visibility string
		Rank       int
	}
	q := `SELECT kb.id, kb.visibility,
		COALESCE(max(CASE m.role WHEN 'manager' THEN 3 WHEN 'editor' THEN 2 WHEN 'viewer' THEN 1 END), 0) AS rank
	FROM knowledge_bases kb
	LEFT JOIN kb_members m ON m.kb_id = kb.id AND (
		(m.member_kind = 'user' AND m.member_id = @user) OR
		(m.member_kind = 'group' AND m.member_id IN (SELECT gm.group_id FROM group_members gm WHERE gm.user_id = @user)))
	WHERE kb.deleted_at IS NULL`
	args := map[string]any{"user": int64(userID)}
	if kbIDs != nil {
		q += ` AND kb.id = ANY(@ids)`
		args["ids"] = idArray(kbIDs)
	}
	q += ` GROUP BY kb.id, kb.visibility ORDER BY kb.id`
	if err := s.conn(ctx).Raw(q, args).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	roles := [...]service.KBRole{"", service.KBViewer, service.KBEditor, service.KBManager}
	out := make([]service.KBGrant, len(rows))
	for i, r := range rows {
		out[i] = service.KBGrant{KnowledgeBaseID: service.ID(r.ID), Visibility: service.Visibility(r.Visibility), Role: roles[r.Rank]}
	}
	return out, nil
}

type groupRow struct {
	ID          int64
	Name        string
	Description string
	ManagedBy   string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	MemberCount int `gorm:"->;-:migration"`
}

func (groupRow) TableName() string { return "groups" }

func (r groupRow) group() *service.Group {
	return &service.Group{
		ID: service.ID(r.ID), Name: r.Name, Description: r.Description, MemberCount: r.MemberCount, ManagedBy: r.ManagedBy,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

const groupColumns = `groups.*, (SELECT count(*) FROM group_members gm JOIN users u ON u.id = gm.user_id
	WHERE gm.group_id = groups.id AND u.deleted_at IS NULL) AS member_count`

// CreateGroup inserts g; a taken name is service.ErrConflict.
func (s *Store) CreateGroup(ctx context.Context, g *service.Group) error {
	row := groupRow{ID: int64(g.ID), Name: g.Name, Description: g.Description}
	if err := s.conn(ctx).Omit("MemberCount").Create(&row).Error; err != nil {
		return translate(err)
	}
	g.CreatedAt, g.UpdatedAt = row.CreatedAt, row.UpdatedAt
	return nil
}

// Group returns one group.
func (s *Store) Group(ctx context.Context, id service.ID) (*service.Group, error) {
	return take(s.conn(ctx).Select(groupColumns), groupRow.group, int64(id))
}

// GroupByName returns a group by case-insensitive name.
func (s *Store) GroupByName(ctx context.Context, name string) (*service.Group, error) {
	return take(s.conn(ctx).Select(groupColumns).Where("lower(name) = lower(?)", name), groupRow.group)
}

// Groups pages through groups in id order after the cursor.
func (s *Store) Groups(ctx context.Context, after service.ID, limit int) ([]*service.Group, error) {
	q := s.conn(ctx).Select(groupColumns).Where("id > ?", int64(after)).Order("id")
	return find(limitTo(q, limit), groupRow.group)
}

// UpdateGroup stores a group's name and description.
func (s *Store) UpdateGroup(ctx context.Context, g *service.Group) error {
	return found(s.conn(ctx).Model(&groupRow{ID: int64(g.ID)}).Updates(map[string]any{
		"name": g.Name, "description": g.Description, "updated_at": time.Now().UTC(),
	}))
}

// DeleteGroup removes a group, its memberships and every grant it held, in
// one transaction: nobody keeps access through a group that is gone.
func (s *Store) DeleteGroup(ctx context.Context, id service.ID) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.db.Exec("DELETE FROM kb_members WHERE member_kind = 'group' AND member_id = ?", int64(id)).Error; err != nil {
			return translate(err)
		}
		return found(tx.db.Exec("DELETE FROM groups WHERE id = ?", int64(id)))
	})
}

// GroupMembers returns a group's live users by username.
func (s *Store) GroupMembers(ctx context.Context, groupID service.ID) ([]*service.User, error) {
	var rows []userRow
	err := s.conn(ctx).Raw(`SELECT u.* FROM users u JOIN group_members gm ON gm.user_id = u.id
		WHERE gm.group_id = ? AND u.deleted_at IS NULL ORDER BY lower(u.username)`, int64(groupID)).Scan(&rows).Error
	if err != nil {
		return nil, translate(err)
	}
	out := make([]*service.User, len(rows))
	for i, r := range rows {
		out[i] = r.user()
	}
	return out, nil
}

// AddGroupMember puts a user in a group; being there already is fine.
func (s *Store) AddGroupMember(ctx context.Context, groupID, userID service.ID) error {
	return translate(s.conn(ctx).Exec(`INSERT INTO group_members (group_id, user_id) VALUES (?, ?)
		ON CONFLICT DO NOTHING`, int64(groupID), int64(userID)).Error)
}

// RemoveGroupMember takes a user out of a group.
func (s *Store) RemoveGroupMember(ctx context.Context, groupID, userID service.ID) error {
	return found(s.conn(ctx).Exec("DELETE FROM group_members WHERE group_id = ? AND user_id = ?", int64(groupID), int64(userID)))
}

type kbMemberRow struct {
	ID         int64
	KbID       int64
	MemberKind string
	MemberID   int64
	Name       string
	Role       string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

func (r kbMemberRow) member() *service.KBMember {
	return &service.KBMember{
		ID: service.ID(r.ID), KnowledgeBaseID: service.ID(r.KbID), Kind: service.MemberKind(r.MemberKind),
		PrincipalID: service.ID(r.MemberID), Name: r.Name, Role: service.KBRole(r.Role), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// kbMemberSelect names each grant's user or group; grants of deleted users
// are left out.
const kbMemberSelect = `SELECT m.*, COALESCE(u.username, g.name) AS name FROM kb_members m
	LEFT JOIN users u ON m.member_kind = 'user' AND u.id = m.member_id AND u.deleted_at IS NULL
	LEFT JOIN groups g ON m.member_kind = 'group' AND g.id = m.member_id
	WHERE COALESCE(u.username, g.name) IS NOT NULL`

// KnowledgeBaseMembers lists a knowledge base's grants, users before
// groups, each by name.
func (s *Store) KnowledgeBaseMembers(ctx context.Context, kbID service.ID) ([]*service.KBMember, error) {
	var rows []kbMemberRow
	if err := s.conn(ctx).Raw(kbMemberSelect+` AND m.kb_id = ? ORDER BY m.member_kind DESC, lower(COALESCE(u.username, g.name))`,
		int64(kbID)).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	return convert(rows, kbMemberRow.member), nil
}

// PutKnowledgeBaseMember grants m.Role to m's user or group, replacing the
// role of an existing grant (then m.ID becomes that grant's id). created
// reports a new grant.
func (s *Store) PutKnowledgeBaseMember(ctx context.Context, m *service.KBMember) (created bool, err error) {
	var row struct {
		ID        int64
		CreatedAt time.Time
		UpdatedAt time.Time
		Inserted  bool
	}
	err = s.conn(ctx).Raw(`INSERT INTO kb_members (id, kb_id, member_kind, member_id, role) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (kb_id, member_kind, member_id) DO UPDATE SET role = EXCLUDED.role, updated_at = now()
		RETURNING id, created_at, updated_at, (xmax = 0) AS inserted`,
		int64(m.ID), int64(m.KnowledgeBaseID), string(m.Kind), int64(m.PrincipalID), string(m.Role)).Scan(&row).Error
	if err != nil {
		return false, translate(err)
	}
	m.ID, m.CreatedAt, m.UpdatedAt = service.ID(row.ID), row.CreatedAt, row.UpdatedAt
	return row.Inserted, nil
}

// DeleteKnowledgeBaseMember removes one grant of a knowledge base.
func (s *Store) DeleteKnowledgeBaseMember(ctx context.Context, kbID, id service.ID) error {
	return found(s.conn(ctx).Exec("DELETE FROM kb_members WHERE kb_id = ? AND id = ?", int64(kbID), int64(id)))
}

// DocumentKnowledgeBases maps document ids, deleted ones included, to their
// knowledge bases; unknown ids are absent.
func (s *Store) DocumentKnowledgeBases(ctx context.Context, ids []service.ID) (map[service.ID]service.ID, error) {
	out := make(map[service.ID]service.ID, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var rows []struct{ ID, KbID int64 }
	if err := s.conn(ctx).Raw("SELECT id, kb_id FROM documents WHERE id = ANY(?)", idArray(ids)).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	for _, r := range rows {
		out[service.ID(r.ID)] = service.ID(r.KbID)
	}
	return out, nil
}
