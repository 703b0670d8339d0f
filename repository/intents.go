package repository

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ragent-go/ragent/service"
)

// intentTreeLockKey is the transaction-level advisory lock every intent-tree
// write holds, so two admins editing at once cannot together create a cycle
// or an over-deep branch that each edit alone would not.
const intentTreeLockKey = 0x696e7465 // "inte"

// jsonList binds a slice to a jsonb array column.
type jsonList[T any] []T

func (l jsonList[T]) Value() (driver.Value, error) {
	if l == nil {
		return "[]", nil
	}
	b, err := json.Marshal([]T(l))
	return string(b), err
}

func (l *jsonList[T]) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case nil:
		*l = nil
		return nil
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		return fmt.Errorf("jsonList: cannot scan %T", src)
	}
	return json.Unmarshal(b, (*[]T)(l))
}

type intentNodeRow struct {
	ID               int64
	ParentID         *int64
	Code             string
	Name             string
	Description      string
	Examples         jsonList[string]
	Kind             string
	KnowledgeBaseIDs jsonList[int64] `gorm:"column:knowledge_base_ids"`
	PromptTemplate   string
	Enabled          bool
	Sort             int
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

func (intentNodeRow) TableName() string { return "intent_nodes" }

func (r intentNodeRow) node() *service.IntentNode {
	n := &service.IntentNode{
		ID: service.ID(r.ID), Code: r.Code, Name: r.Name, Description: r.Description,
		Examples: append([]string{}, r.Examples...), Kind: service.IntentKind(r.Kind),
		KnowledgeBaseIDs: make([]service.ID, len(r.KnowledgeBaseIDs)), PromptTemplate: r.PromptTemplate,
		Enabled: r.Enabled, Sort: r.Sort, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	if r.ParentID != nil {
		n.ParentID = service.ID(*r.ParentID)
	}
	for i, id := range r.KnowledgeBaseIDs {
		n.KnowledgeBaseIDs[i] = service.ID(id)
	}
	return n
}

func intentRow(n *service.IntentNode) intentNodeRow {
	r := intentNodeRow{
		ID: int64(n.ID), Code: n.Code, Name: n.Name, Description: n.Description,
		Examples: jsonList[string](n.Examples), Kind: string(n.Kind), PromptTemplate: n.PromptTemplate,
		Enabled: n.Enabled, Sort: n.Sort, KnowledgeBaseIDs: make(jsonList[int64], len(n.KnowledgeBaseIDs)),
	}
	if n.ParentID != 0 {
		p := int64(n.ParentID)
		r.ParentID = &p
	}
	for i, id := range n.KnowledgeBaseIDs {
		r.KnowledgeBaseIDs[i] = int64(id)
	}
	return r
}

// IntentNodes returns every node of the intent tree as a flat list, with
// ParentID set and Children and Path empty.
func (s *Store) IntentNodes(ctx context.Context) ([]*service.IntentNode, error) {
	return find(s.conn(ctx).Order("sort, id"), intentNodeRow.node)
}

// IntentTree returns the whole intent tree: the roots, each with its
// descendants and every node's path.
func (s *Store) IntentTree(ctx context.Context) ([]*service.IntentNode, error) {
	nodes, err := s.IntentNodes(ctx)
	if err != nil {
		return nil, err
	}
	return service.BuildIntentTree(nodes), nil
}

// editIntents runs fn in a transaction that holds the intent-tree lock and
// has read every node, so fn validates against the tree it changes.
func (s *Store) editIntents(ctx context.Context, fn func(tx *Store, nodes []*service.IntentNode) error) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.db.Exec("SELECT pg_advisory_xact_lock(?)", intentTreeLockKey).Error; err != nil {
			return translate(err)
		}
		nodes, err := tx.IntentNodes(ctx)
		if err != nil {
			return err
		}
		return fn(tx, nodes)
	})
}

// CreateIntent inserts n after check approved it against the current tree
// (read under the tree lock, in the inserting transaction). A taken code is
// service.ErrConflict.
func (s *Store) CreateIntent(ctx context.Context, n *service.IntentNode, check func(nodes []*service.IntentNode) error) error {
	return s.editIntents(ctx, func(tx *Store, nodes []*service.IntentNode) error {
		if err := check(nodes); err != nil {
			return err
		}
		row := intentRow(n)
		if err := tx.conn(ctx).Create(&row).Error; err != nil {
			return translate(err)
		}
		n.CreatedAt, n.UpdatedAt = row.CreatedAt, row.UpdatedAt
		return nil
	})
}

// UpdateIntent replaces every editable field of n after check approved it
// against the current tree, read under the tree lock.
func (s *Store) UpdateIntent(ctx context.Context, n *service.IntentNode, check func(nodes []*service.IntentNode) error) error {
	return s.editIntents(ctx, func(tx *Store, nodes []*service.IntentNode) error {
		if err := check(nodes); err != nil {
			return err
		}
		row := intentRow(n)
		now := time.Now().UTC()
		res := tx.conn(ctx).Model(&intentNodeRow{ID: row.ID}).Updates(map[string]any{
			"parent_id": row.ParentID, "code": row.Code, "name": row.Name, "description": row.Description,
			"examples": row.Examples, "kind": row.Kind, "knowledge_base_ids": row.KnowledgeBaseIDs,
			"prompt_template": row.PromptTemplate, "enabled": row.Enabled, "sort": row.Sort, "updated_at": now,
		})
		if err := found(res); err != nil {
			return err
		}
		n.UpdatedAt = now
		return nil
	})
}

// DeleteIntents deletes the nodes that plan picks from the current tree,
// read under the tree lock, in one statement (so a subtree goes at once and
// its parent references never dangle).
func (s *Store) DeleteIntents(ctx context.Context, plan func(nodes []*service.IntentNode) ([]service.ID, error)) error {
	return s.editIntents(ctx, func(tx *Store, nodes []*service.IntentNode) error {
		ids, err := plan(nodes)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		return translate(tx.conn(ctx).Exec("DELETE FROM intent_nodes WHERE id = ANY(?)", idArray(ids)).Error)
	})
}

// LiveKnowledgeBaseIDs returns those of ids that name live knowledge bases.
func (s *Store) LiveKnowledgeBaseIDs(ctx context.Context, ids []service.ID) ([]service.ID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var found []int64
	err := s.conn(ctx).Raw("SELECT id FROM knowledge_bases WHERE id = ANY(?) AND deleted_at IS NULL", idArray(ids)).
		Scan(&found).Error
	if err != nil {
		return nil, translate(err)
	}
	out := make([]service.ID, len(found))
	for i, id := range found {
		out[i] = service.ID(id)
	}
	return out, nil
}
