package chat

import (
	"context"
	"encoding/json"

	"github.com/ragent-go/ragent/service"
)

// checkReadable fails with service.ErrNotFound when the question names a
// knowledge base p cannot read, before any stream starts.
func (s *Service) checkReadable(ctx context.Context, p service.Principal, ids []service.ID) error {
	if len(ids) == 0 {
		return nil
	}
	roles, err := s.d.Access.Roles(ctx, p, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, ok := roles[id]; !ok {
			return service.Errorf(service.ErrNotFound, "knowledge base %s not found", id)
		}
	}
	return nil
}

// visibleSources hides, in saved answers, the sources whose knowledge base
// the reader can no longer read (unshared, made private, or deleted): the
// reader sees the history as their current access allows. The answer text
// itself is theirs and stays as it was written.
func (s *Service) visibleSources(ctx context.Context, p service.Principal, msgs []service.Message) error {
	type source struct {
		DocumentID service.ID `json:"documentId"`
	}
	parsed := make([][]json.RawMessage, len(msgs))
	var docIDs []service.ID
	for i, m := range msgs {
		if len(m.Sources) == 0 {
			continue
		}
		var raw []json.RawMessage
		if err := json.Unmarshal(m.Sources, &raw); err != nil {
			return err
		}
		parsed[i] = raw
		for _, r := range raw {
			var src source
			if err := json.Unmarshal(r, &src); err != nil {
				return err
			}
			docIDs = append(docIDs, src.DocumentID)
		}
	}
	if len(docIDs) == 0 {
		return nil
	}
	kbOf, err := s.d.Store.DocumentKnowledgeBases(ctx, docIDs)
	if err != nil {
		return err
	}
	kbIDs := make([]service.ID, 0, len(kbOf))
	for _, id := range kbOf {
		kbIDs = append(kbIDs, id)
	}
	readable, err := s.d.Access.Roles(ctx, p, kbIDs)
	if err != nil {
		return err
	}
	for i, raw := range parsed {
		if raw == nil {
			continue
		}
		kept := raw[:0:0]
		for _, r := range raw {
			var src source
			_ = json.Unmarshal(r, &src) // parsed above
			kb, known := kbOf[src.DocumentID]
			if _, ok := readable[kb]; known && ok {
				kept = append(kept, r)
			}
		}
		if len(kept) == len(raw) {
			continue
		}
		if len(kept) == 0 {
			msgs[i].Sources = nil
			continue
		}
		if msgs[i].Sources, err = json.Marshal(kept); err != nil {
			return err
		}
	}
	return nil
}
