package mcp

import (
	"cmp"
	"context"
	"encoding/base64"
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
	"github.com/ragent-go/ragent/service/chat"
	"github.com/ragent-go/ragent/service/retrieve"
)

// toolRoutes names, per tool, the HTTP route it mirrors: a key needs that
// route's scopes (api.KeyScopes, the one table) to call the tool.
var toolRoutes = map[string]string{
	"list_knowledge_bases": "GET /api/v1/knowledge-bases",
	"search":               "POST /api/v1/search",
	"ask":                  "POST /api/v1/chat",
	"get_document":         "GET /api/v1/documents/:id",
	"get_chunk":            "GET /api/v1/documents/:id/chunks",
}

// schemaTypes are how the domain's types look on the wire: ids are decimal
// strings (service.ID's JSON), times RFC 3339.
var schemaTypes = map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[service.ID](): {Type: "string", Pattern: "^[0-9]+$", Description: "an id (decimal string)"},
	reflect.TypeFor[time.Time]():  {Type: "string", Format: "date-time"},
	reflect.TypeFor[service.SearchMode](): {Type: "string", Enum: []any{
		string(service.SearchHybrid), string(service.SearchKeyword), string(service.SearchVector)}},
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
	tool(h, "get_document", "Read a document",
		"Returns a document's details and a page of its chunks in order (limit, default 20, at most 100; continue with fromOrdinal).", h.getDocument)
	tool(h, "get_chunk", "Read a chunk",
		"Returns one chunk (a passage of a document, as search and ask cite it) with its document's name.", h.getChunk)
}

// --- list_knowledge_bases ---

// listKBsIn pages as MCP's list methods do (the spec's "Pagination"): an
// opaque cursor from the previous page's nextCursor.
type listKBsIn struct {
	Cursor string `json:"cursor,omitempty" jsonschema:"nextCursor of the previous page (opaque); omitted: the first page"`
	Limit  int    `json:"limit,omitempty" jsonschema:"knowledge bases per page, 1 to 200 (default 100)"`
}

type knowledgeBase struct {
	ID            service.ID `json:"id"`
	Name          string     `json:"name"`
	Description   string     `json:"description"`
	DocumentCount int        `json:"documentCount"`
	Role          string     `json:"role" jsonschema:"the key's role on it: viewer, editor or manager"`
}

type listKBsOut struct {
	KnowledgeBases []knowledgeBase `json:"knowledgeBases"`
	NextCursor     string          `json:"nextCursor,omitempty" jsonschema:"pass as cursor for the next page; absent on the last page"`
}

const (
	defaultKBPage = 100
	maxKBPage     = 200
)

// A cursor is the last id of its page, encoded so that clients treat it as
// the opaque token the spec says it is.
func kbCursor(id service.ID) string {
	return base64.RawURLEncoding.EncodeToString([]byte("kb:" + id.String()))
}

func parseKBCursor(cursor string) (service.ID, error) {
	if cursor == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	rest, ok := strings.CutPrefix(string(b), "kb:")
	if err != nil || !ok {
		return 0, service.Errorf(service.ErrInvalid, "invalid cursor: pass nextCursor from the previous page as it is")
	}
	id, err := service.ParseID(rest)
	if err != nil {
		return 0, service.Errorf(service.ErrInvalid, "invalid cursor: pass nextCursor from the previous page as it is")
	}
	return id, nil
}

func (h *Handler) listKnowledgeBases(ctx context.Context, c *caller, _ *mcp.CallToolRequest, in listKBsIn) (*mcp.CallToolResult, listKBsOut, error) {
	limit := cmp.Or(in.Limit, defaultKBPage)
	if limit < 1 || limit > maxKBPage {
		return nil, listKBsOut{}, service.Errorf(service.ErrInvalid, "limit must be between 1 and %d", maxKBPage)
	}
	after, err := parseKBCursor(in.Cursor)
	if err != nil {
		return nil, listKBsOut{}, err
	}
	// One more than the page tells whether another follows, so the last
	// page has no cursor (no empty page to fetch).
	kbs, err := h.deps.KnowledgeBases.List(ctx, c.p, after, limit+1)
	if err != nil {
		return nil, listKBsOut{}, err
	}
	var out listKBsOut
	if len(kbs) > limit {
		kbs = kbs[:limit]
		out.NextCursor = kbCursor(kbs[limit-1].ID)
	}
	out.KnowledgeBases = make([]knowledgeBase, len(kbs))
	for i, kb := range kbs {
		out.KnowledgeBases[i] = knowledgeBase{ID: kb.ID, Name: kb.Name, Description: kb.Description, DocumentCount: kb.DocumentCount, Role: string(kb.Role)}
	}
	return nil, out, nil
}

// --- search ---

type searchIn struct {
	Query            string             `json:"query" jsonschema:"what to look for, in natural language or keywords"`
	KnowledgeBaseIDs []service.ID       `json:"knowledgeBaseIds,omitempty" jsonschema:"knowledge bases to search (ids from list_knowledge_bases); omitted: every one the key can read"`
	Mode             service.SearchMode `json:"mode,omitempty" jsonschema:"hybrid (default), keyword or vector"`
	TopK             int                `json:"topK,omitempty" jsonschema:"how many results (default 5)"`
}

type searchResult struct {
	ChunkID         service.ID `json:"chunkId"`
	DocumentID      service.ID `json:"documentId"`
	DocumentName    string     `json:"documentName"`
	KnowledgeBaseID service.ID `json:"knowledgeBaseId"`
	Section         string     `json:"section"`
	Score           float64    `json:"score"`
	Content         string     `json:"content"`
	Link            string     `json:"link" jsonschema:"the document on ragent's HTTP API (GET with the same API key)"`
}

type searchOut struct {
	Results []searchResult `json:"results"`
	// KeywordOnly are knowledge bases searched by keyword only: their
	// vectors are in a space this server cannot embed the query in.
	KeywordOnly []retrieve.KeywordOnly `json:"keywordOnly,omitempty"`
}

func (h *Handler) search(ctx context.Context, c *caller, _ *mcp.CallToolRequest, in searchIn) (*mcp.CallToolResult, searchOut, error) {
	res, err := h.deps.Search.Run(ctx, c.p, retrieve.Query{Text: in.Query, KnowledgeBaseIDs: in.KnowledgeBaseIDs, TopK: in.TopK, Mode: in.Mode})
	if err != nil {
		return nil, searchOut{}, err
	}
	out := searchOut{Results: make([]searchResult, len(res.Results)), KeywordOnly: res.KeywordOnly}
	for i, r := range res.Results {
		out.Results[i] = searchResult{ChunkID: r.ChunkID, DocumentID: r.DocumentID, DocumentName: r.DocumentName, KnowledgeBaseID: r.KnowledgeBaseID,
			Section: r.Section, Score: r.Score, Content: r.Content, Link: documentLink(c, r.DocumentID)}
	}
	return nil, out, nil
}

func documentLink(c *caller, id service.ID) string {
	return c.base + "/api/v1/documents/" + id.String()
}

// --- ask ---

type askIn struct {
	Question         string       `json:"question" jsonschema:"the question, as a person would ask it"`
	KnowledgeBaseIDs []service.ID `json:"knowledgeBaseIds,omitempty" jsonschema:"knowledge bases to answer from; omitted: every one the key can read"`
	ConversationID   service.ID   `json:"conversationId,omitempty" jsonschema:"an earlier answer's conversationId, to ask a follow-up"`
}

type citedSource struct {
	Index        int        `json:"index" jsonschema:"the n of the answer's [n] markers"`
	ChunkID      service.ID `json:"chunkId"`
	DocumentID   service.ID `json:"documentId"`
	DocumentName string     `json:"documentName"`
	Score        float64    `json:"score"`
	Excerpt      string     `json:"excerpt"`
	Link         string     `json:"link"`
}

type askOut struct {
	Answer         string                `json:"answer" jsonschema:"the answer, citing sources as [n]"`
	Status         service.MessageStatus `json:"status" jsonschema:"how the answer ended: completed, or why not"`
	ConversationID service.ID            `json:"conversationId"`
	MessageID      service.ID            `json:"messageId"`
	Sources        []citedSource         `json:"sources"`
}

// ask runs one chat turn through the chat use case, exactly the path of
// POST /api/v1/chat, and reports its events as progress.
func (h *Handler) ask(ctx context.Context, c *caller, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, askOut, error) {
	var out askOut
	var answer strings.Builder
	var failed error
	progress := newProgress(ctx, req)
	err := h.deps.Chat.Chat(ctx, c.p, chat.Request{Question: in.Question, KnowledgeBaseIDs: in.KnowledgeBaseIDs, ConversationID: in.ConversationID},
		func(e chat.Event) error {
			switch d := e.Data.(type) {
			case chat.Meta:
				out.ConversationID, out.MessageID = d.ConversationID, d.MessageID
			case chat.Queue:
				progress.send(fmt.Sprintf("waiting for the model: place %d of %d in the queue", d.Position, d.Queued))
			case chat.Sources:
				out.Sources = make([]citedSource, len(d.Sources))
				for i, s := range d.Sources {
					out.Sources[i] = citedSource{Index: s.Index, ChunkID: s.ChunkID, DocumentID: s.DocumentID, DocumentName: s.DocumentName,
						Score: s.Score, Excerpt: s.Excerpt, Link: documentLink(c, s.DocumentID)}
				}
			case chat.Message:
				if d.Type == "response" {
					answer.WriteString(d.Delta)
					progress.send(d.Delta)
				}
			case chat.Reject:
				failed = &chatFailure{d.Code, d.Message, d.RetryAfter}
			case chat.Error:
				failed = &chatFailure{d.Code, d.Message, d.RetryAfter}
			case chat.Cancel:
				failed = &chatFailure{"cancelled", "the answer was stopped (" + d.Reason + ")", 0}
			case chat.Finish:
				out.Status = d.Status
			}
			return nil
		})
	if err != nil {
		return nil, out, err
	}
	if failed != nil {
		return nil, out, failed
	}
	out.Answer = answer.String()
	if out.Sources == nil {
		out.Sources = []citedSource{}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: citedText(out)}}}, out, nil
}

// chatFailure is a failure the chat stream reported (a reject, an error, a
// cancel), with the stream's code.
type chatFailure struct {
	code, message string
	retryAfter    int // seconds
}

func (f *chatFailure) Error() string {
	if f.retryAfter > 0 {
		return fmt.Sprintf("%s: %s (retry after %ds)", f.code, f.message, f.retryAfter)
	}
	return f.code + ": " + f.message
}

// citedText is the answer followed by its numbered sources, for clients
// that show text only.
func citedText(out askOut) string {
	var b strings.Builder
	b.WriteString(out.Answer)
	if len(out.Sources) > 0 {
		b.WriteString("\n\nSources:\n")
		for _, s := range out.Sources {
			fmt.Fprintf(&b, "[%d] %s (%s)\n", s.Index, s.DocumentName, s.Link)
		}
	}
	return b.String()
}

// progress sends a call's progress notifications when the client asked for
// them (a progress token), each one counting up.
type progress struct {
	ctx   context.Context
	req   *mcp.CallToolRequest
	token any
	n     float64
}

func newProgress(ctx context.Context, req *mcp.CallToolRequest) *progress {
	return &progress{ctx: ctx, req: req, token: req.Params.GetProgressToken()}
}

func (p *progress) send(msg string) {
	if p.token == nil {
		return
	}
	p.n++
	// A client that stops reading loses progress only; the result follows.
	_ = p.req.Session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: p.n, Message: msg})
}

// --- get_document ---

type getDocumentIn struct {
	DocumentID  service.ID `json:"documentId"`
	FromOrdinal int        `json:"fromOrdinal,omitempty" jsonschema:"the first chunk to return, by ordinal (default 0: the document's first)"`
	Limit       int        `json:"limit,omitempty" jsonschema:"chunks to return, 0 to 100 (default 20)"`
}

type documentChunk struct {
	ID      service.ID `json:"id"`
	Ordinal int        `json:"ordinal"`
	Section string     `json:"section"`
	Content string     `json:"content"`
}

type getDocumentOut struct {
	ID              service.ID      `json:"id"`
	KnowledgeBaseID service.ID      `json:"knowledgeBaseId"`
	Name            string          `json:"name"`
	Mime            string          `json:"mime"`
	Size            int64           `json:"size"`
	Status          string          `json:"status"`
	ChunkCount      int             `json:"chunkCount"`
	UpdatedAt       time.Time       `json:"updatedAt"`
	Link            string          `json:"link"`
	Chunks          []documentChunk `json:"chunks"`
	NextOrdinal     *int            `json:"nextOrdinal,omitempty" jsonschema:"pass as fromOrdinal for the next chunks; absent when there are no more"`
}

func (h *Handler) getDocument(ctx context.Context, c *caller, _ *mcp.CallToolRequest, in getDocumentIn) (*mcp.CallToolResult, getDocumentOut, error) {
	limit := in.Limit
	switch {
	case limit == 0:
		limit = 20
	case limit < 0 || limit > 100 || in.FromOrdinal < 0:
		return nil, getDocumentOut{}, service.Errorf(service.ErrInvalid, "limit must be between 0 and 100 and fromOrdinal not negative")
	}
	doc, err := h.deps.Ingest.Document(ctx, c.p, in.DocumentID)
	if err != nil {
		return nil, getDocumentOut{}, err
	}
	out := getDocumentOut{ID: doc.ID, KnowledgeBaseID: doc.KnowledgeBaseID, Name: doc.Name, Mime: doc.Mime, Size: doc.Size,
		Status: string(doc.Status), ChunkCount: doc.ChunkCount, UpdatedAt: doc.UpdatedAt, Link: documentLink(c, doc.ID), Chunks: []documentChunk{}}
	chunks, err := h.deps.Ingest.Chunks(ctx, c.p, doc.ID, in.FromOrdinal-1, limit)
	if err != nil {
		return nil, getDocumentOut{}, err
	}
	for _, ch := range chunks {
		out.Chunks = append(out.Chunks, documentChunk{ID: ch.ID, Ordinal: ch.Ordinal, Section: ch.Section, Content: ch.Content})
	}
	if len(chunks) == limit {
		next := chunks[len(chunks)-1].Ordinal + 1
		out.NextOrdinal = &next
	}
	return nil, out, nil
}

// --- get_chunk ---

type getChunkIn struct {
	ChunkID service.ID `json:"chunkId"`
}

type getChunkOut struct {
	ID              service.ID `json:"id"`
	DocumentID      service.ID `json:"documentId"`
	DocumentName    string     `json:"documentName"`
	KnowledgeBaseID service.ID `json:"knowledgeBaseId"`
	Ordinal         int        `json:"ordinal"`
	Section         string     `json:"section"`
	Content         string     `json:"content"`
	Link            string     `json:"link"`
}

func (h *Handler) getChunk(ctx context.Context, c *caller, _ *mcp.CallToolRequest, in getChunkIn) (*mcp.CallToolResult, getChunkOut, error) {
	ch, err := h.deps.Ingest.Chunk(ctx, c.p, in.ChunkID)
	if err != nil {
		return nil, getChunkOut{}, err
	}
	doc, err := h.deps.Ingest.Document(ctx, c.p, ch.DocumentID)
	if err != nil {
		return nil, getChunkOut{}, err
	}
	return nil, getChunkOut{ID: ch.ID, DocumentID: ch.DocumentID, DocumentName: doc.Name, KnowledgeBaseID: ch.KnowledgeBaseID,
		Ordinal: ch.Ordinal, Section: ch.Section, Content: ch.Content, Link: documentLink(c, ch.DocumentID)}, nil
}
