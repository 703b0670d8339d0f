package api

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// Most routes are one use-case call: read the path's :id and the JSON body,
// call, answer the result or the error. The functions below build those
// handlers from the use-case method itself, so the router says which
// method serves a route and with which status; routes that do more than
// that (uploads, chat, member grants, …) keep handlers of their own.

// page answers one page of what list finds (?cursor=, ?limit=):
// {"items":[…],"nextCursor":…}.
func page[T any](list func(context.Context, service.Principal, service.ID, int) ([]T, error), cursor func(T) string) gin.HandlerFunc {
	return func(c *gin.Context) {
		after, limit, ok := pageParams(c)
		if !ok {
			return
		}
		items, err := list(c.Request.Context(), principal(c), after, limit)
		if err != nil {
			fail(c, err)
			return
		}
		c.JSON(http.StatusOK, newList(items, limit, cursor))
	}
}

// all answers everything call finds for the path's :id in one page:
// {"items":[…],"nextCursor":null}. It serves short lists (members,
// webhooks) that have no cursor.
func all[T any](call func(context.Context, service.Principal, service.ID) ([]T, error)) gin.HandlerFunc {
	return byID(http.StatusOK, func(ctx context.Context, p service.Principal, id service.ID) (list[T], error) {
		items, err := call(ctx, p, id)
		return newList(items, 0, func(T) string { return "" }), err
	})
}

// byID answers status with what call returns for the path's :id.
func byID[Out any](status int, call func(context.Context, service.Principal, service.ID) (Out, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := pathID(c, "id")
		if !ok {
			return
		}
		answer(c, status)(call(c.Request.Context(), principal(c), id))
	}
}

// withBody answers status with what call makes of the JSON body.
func withBody[In, Out any](s *Server, status int, call func(context.Context, service.Principal, In) (Out, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		var in In
		if !s.bindJSON(c, &in) {
			return
		}
		answer(c, status)(call(c.Request.Context(), principal(c), in))
	}
}

// withIDBody answers status with what call makes of the path's :id and the
// JSON body.
func withIDBody[In, Out any](s *Server, status int, call func(context.Context, service.Principal, service.ID, In) (Out, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := pathID(c, "id")
		if !ok {
			return
		}
		var in In
		if !s.bindJSON(c, &in) {
			return
		}
		answer(c, status)(call(c.Request.Context(), principal(c), id, in))
	}
}

// deleteByID answers 204 once call has deleted the path's :id.
func deleteByID(call func(context.Context, service.Principal, service.ID) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := pathID(c, "id")
		if !ok {
			return
		}
		noContent(c, call(c.Request.Context(), principal(c), id))
	}
}

// deleteChild answers 204 once call has removed the path's :<child> from
// its parent :id (a member from a group, a webhook from a knowledge base).
func deleteChild(child string, call func(ctx context.Context, p service.Principal, id, childID service.ID) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := pathID(c, "id")
		if !ok {
			return
		}
		childID, ok := pathID(c, child)
		if !ok {
			return
		}
		noContent(c, call(c.Request.Context(), principal(c), id, childID))
	}
}

// answer returns the function that answers a use case's result: status
// with v, or the error; answer(c, status)(call(…)) reads as one step.
func answer(c *gin.Context, status int) func(v any, err error) {
	return func(v any, err error) {
		if err != nil {
			fail(c, err)
			return
		}
		c.JSON(status, v)
	}
}

// noContent answers 204, or the error.
func noContent(c *gin.Context, err error) {
	if err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// noStore keeps a route's answers out of every cache: they carry a secret
// shown this once (a new API key, a webhook's signing secret).
func noStore(c *gin.Context) { c.Header("Cache-Control", "no-store") }

// The cursors of the paged lists: the last row's id.
func apiKeyCursor(k *service.APIKey) string                { return k.ID.String() }
func conversationCursor(cv *service.Conversation) string   { return cv.ID.String() }
func groupCursor(g *service.Group) string                  { return g.ID.String() }
func knowledgeBaseCursor(kb *service.KnowledgeBase) string { return kb.ID.String() }
func userCursor(u *service.User) string                    { return u.ID.String() }

// The admin catalogues (intents, term mappings) take no principal: the
// router's requireAdmin has checked the caller. anyCaller, anyCallerID and
// anyCallerDelete fit their use cases to the handlers above.

func anyCaller[In, Out any](call func(context.Context, In) (Out, error)) func(context.Context, service.Principal, In) (Out, error) {
	return func(ctx context.Context, _ service.Principal, in In) (Out, error) { return call(ctx, in) }
}

func anyCallerID[In, Out any](call func(context.Context, service.ID, In) (Out, error)) func(context.Context, service.Principal, service.ID, In) (Out, error) {
	return func(ctx context.Context, _ service.Principal, id service.ID, in In) (Out, error) {
		return call(ctx, id, in)
	}
}

func anyCallerDelete(call func(context.Context, service.ID) error) func(context.Context, service.Principal, service.ID) error {
	return func(ctx context.Context, _ service.Principal, id service.ID) error { return call(ctx, id) }
}
