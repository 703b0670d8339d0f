package api

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
)

// search answers POST /search: {"results":[…]} and, where some knowledge
// bases could be searched by keyword only, "keywordOnly".
func (s *Server) search(ctx context.Context, p service.Principal, q retrieve.Query) (gin.H, error) {
	res, err := s.deps.Search.Run(ctx, p, q)
	if err != nil {
		return nil, err
	}
	if res.Results == nil {
		res.Results = []service.SearchResult{}
	}
	out := gin.H{"results": res.Results}
	if len(res.KeywordOnly) > 0 {
		// Knowledge bases whose vectors are in a space this instance cannot
		// embed (docs/embeddings.md "Embedding model changes").
		out["keywordOnly"] = res.KeywordOnly
	}
	return out, nil
}
