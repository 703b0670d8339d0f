package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ragent-go/ragent/api"
	"github.com/ragent-go/ragent/service"
)

// toolRoutes names, per tool, the HTTP route it mirrors: a key needs that
// route's scopes (api.KeyScopes, the one table) to call the tool.
var toolRoutes = map[string]string{
	"list_knowledge_bases": "GET /api/v1/knowledge-bases",
	"search":               "POST /api/v1/search",
	"ask":                  "POST /api/v1/chat",
	"get_document":         "GET /api/v1/documents/:id",
	"get_chunk":            "GET /api/v1/documents/:id/chunks",
	"feedback":             "POST /api/v1/messages/:id/feedback",
}

// schemaTypes are how the domain's types look on the wire: ids are decimal
// strings (service.ID's JSON), times RFC 3339.
var schemaTypes = map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[service.ID](): {Type: "string", Pattern: "^[0-9]+$", Description: "an id (decimal string)"},
	reflect.TypeFor[time.Time]():  {Type: "string", Format: "date-time"},
	reflect.TypeFor[service.SearchMode](): {Type: "string", Enum: []any{
		string(service.SearchHybrid), string(service.SearchKeyword), string(service.SearchVector)}},
	reflect.TypeFor[service.Rating](): {Type: "string", Enum: []any{string(service.RatingUp), string(service.RatingDown)}},
}

func schema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: schemaTypes})
	if err != nil {
		panic(fmt.Sprintf("schema of %T: %v", *new(T), err))
	}
	return s
}

// tool registers a typed tool whose handler runs as the request's caller,
// once the key's scopes admit it. It does what the SDK's typed AddTool does
// but for the output's validation against its schema, which costs a decode
// and a re-encode of every result (a search's p50 is in BENCHMARKS.md): the
// output is ours and typed, and the official TypeScript client validates it
// against the schema in TestMCPOfficialClients.
func tool[In, Out any](h *Handler, name, title, description string, run func(context.Context, *caller, *mcp.CallToolRequest, In) (*mcp.CallToolResult, Out, error)) {
	route := toolRoutes[name]
	inSchema := schema[In]()
	input, err := inSchema.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", name, err))
	}
	t := &mcp.Tool{Name: name, Title: title, Description: description, InputSchema: inSchema, OutputSchema: schema[Out](),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: name != "ask", OpenWorldHint: new(false)}}
	h.server.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c, _ := req.Extra.TokenInfo.Extra[callerExtra].(*caller)
		if c == nil {
			return failed(errors.New("unauthenticated: no API key on this request")), nil
		}
		if err := allowed(c.p, route); err != nil {
			return failed(h.toolError(ctx, name, err)), nil
		}
		in, err := decode[In](req.Params.Arguments, input)
		if err != nil {
			return failed(err), nil
		}
		// The SDK detaches a call from its HTTP request: the request's
		// values come from the caller, the shutdown from the handler.
		ctx = service.WithPrincipal(service.WithClientIP(service.WithRequestID(ctx, c.requestID), c.clientIP), c.p)
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(h.base, func() { cancel(context.Cause(h.base)) })
		defer stop()
		res, out, err := run(ctx, c, req, in)
		if err != nil {
			return failed(h.toolError(ctx, name, err)), nil
		}
		body, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("tool %s: encode output: %w", name, err)
		}
		if res == nil {
			// Clients that read text only get the JSON, as the spec suggests.
			res = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(body)}}}
		}
		res.StructuredContent = json.RawMessage(body)
		return res, nil
	})
}

// decode validates a call's arguments against the input schema and
// decodes them.
func decode[In any](args json.RawMessage, schema *jsonschema.Resolved) (In, error) {
	var in In
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return in, fmt.Errorf("invalid: arguments are not JSON: %w", err)
	}
	if err := schema.Validate(v); err != nil {
		return in, fmt.Errorf("invalid: arguments: %w", err)
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return in, fmt.Errorf("invalid: arguments: %w", err)
	}
	return in, nil
}

// failed is a tool error: the client's model reads its text.
func failed(err error) *mcp.CallToolResult {
	var res mcp.CallToolResult
	res.SetError(err)
	return &res
}

// allowed checks the key's scopes against those of the tool's route.
func allowed(p service.Principal, route string) error {
	need := api.KeyScopes(route)
	names := make([]string, len(need))
	for i, s := range need {
		if p.Key.HasScope(s) {
			return nil
		}
		names[i] = string(s)
	}
	return service.WithDetails(service.ErrForbidden, "this API key lacks the "+strings.Join(names, " or ")+" scope this tool needs",
		map[string]string{"scope": strings.Join(names, "|")})
}

// toolError is the text of a failed call ("code: message", the codes of
// the HTTP API), which the client's model reads; an unexpected failure is
// logged here and told as internal.
func (h *Handler) toolError(ctx context.Context, tool string, err error) error {
	var stream *chatFailure
	if errors.As(err, &stream) {
		return stream
	}
	code := service.CodeOf(err)
	if code == service.CodeInternal {
		h.deps.Log.ErrorContext(ctx, "mcp tool failed", "tool", tool, "err", err)
		return errors.New("internal: the tool failed; try again later")
	}
	msg := err.Error()
	var se *service.Error
	if errors.As(err, &se) {
		msg = se.Message
		if se.RetryAfter > 0 {
			msg += fmt.Sprintf(" (retry after %ds)", int(max(se.RetryAfter.Seconds(), 1)))
		}
	}
	return fmt.Errorf("%s: %s", code, msg)
}

func (h *Handler) addTools() {
	tool(h, "list_knowledge_bases", "List knowledge bases",
		"Lists the knowledge bases this API key can read, with their ids for search and ask, a page at a time "+
			"(limit, default 100, at most 200): while the result has nextCursor, call again with it as cursor for the rest.", h.listKnowledgeBases)
	tool(h, "search", "Search the knowledge bases",
		"Finds the passages (chunks) most relevant to a query, in the named knowledge bases or every one the key can read. "+
			"Each result has its document's name, section, relevance score, text and a link. Needs the search scope.", h.search)
	tool(h, "ask", "Ask a question",
		"Answers a question from the knowledge bases, citing its sources as numbered markers [n] that index the returned sources. "+
			"Pass conversationId from an earlier answer to ask a follow-up. The question waits in the same fair queue as every chat; "+
			"progress notifications tell its place in line, then carry the answer as it is written. Needs the chat scope.", h.ask)
	tool(h, "feedback", "Rate an answer",
		"Records a thumbs up or down, with an optional comment, on an answer ask gave (its messageId), for the knowledge base's admins "+
			"to review; rating the same answer again replaces the rating. Only answers this key can see. Needs the chat scope.", h.feedback)
	tool(h, "get_document", "Read a document",
		"Returns a document's details and a page of its chunks in order (limit, default 20, at most 100; continue with fromOrdinal).", h.getDocument)
	tool(h, "get_chunk", "Read a chunk",
		"Returns one chunk (a passage of a document, as search and ask cite it) with its document's name.", h.getChunk)
}
