package repository

import (
	"context"

	"github.com/ragent-go/ragent/service"
)

// KnowledgeBaseSettings returns the live knowledge bases among ids, in id
// order, without their document count (DocumentCount is 0). Every search and
// every ingested document reads its knowledge bases' settings; counting a
// knowledge base's documents, as KnowledgeBase and KnowledgeBasesIn do for
// the admin pages, takes time linear in them (55–80 ms at 200,000 documents
// on the 2-core benchmark machine), which those paths must not pay.
func (s *Store) KnowledgeBaseSettings(ctx context.Context, ids []service.ID) ([]*service.KnowledgeBase, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return find(s.conn(ctx).Select("knowledge_bases.*").Where("id = ANY(?)", idArray(ids)).Order("id"), knowledgeBaseRow.kb)
}
