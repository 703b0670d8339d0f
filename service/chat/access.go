package chat

import (
	"context"
	"slices"

	"github.com/ragent-go/ragent/service"
)

// visibleSources hides, in saved answers, the sources whose knowledge base
// the reader can no longer read (unshared, made private, or deleted): the
// reader sees the history as their current access allows. The answer text
// itself is theirs and stays as it was written.
func (s *Service) visibleSources(ctx context.Context, p service.Principal, msgs []service.Message) error {
	var docIDs []service.ID
	for _, m := range msgs {
		for _, src := range m.Sources {
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
	for i := range msgs {
		msgs[i].Sources = slices.DeleteFunc(msgs[i].Sources, func(src service.Source) bool {
			kb, known := kbOf[src.DocumentID]
			_, ok := readable[kb]
			return !known || !ok
		})
	}
	return nil
}
