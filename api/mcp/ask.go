package mcp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/chat"
)

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

type feedbackIn struct {
	MessageID service.ID     `json:"messageId" jsonschema:"the messageId of an answer from ask"`
	Rating    service.Rating `json:"rating" jsonschema:"up (the answer helped) or down (it did not)"`
	Comment   string         `json:"comment,omitempty" jsonschema:"what was wrong or missing, for the admins (optional)"`
}

type feedbackOut struct {
	ID             service.ID     `json:"id"`
	MessageID      service.ID     `json:"messageId"`
	ConversationID service.ID     `json:"conversationId"`
	Rating         service.Rating `json:"rating"`
	Comment        string         `json:"comment"`
	UpdatedAt      time.Time      `json:"updatedAt"`
}

// feedback rates an answer through the use case of POST
// /api/v1/messages/{id}/feedback: the message must be an answer in a
// conversation of the key's owner within the key's knowledge bases, or it
// is not found.
func (h *Handler) feedback(ctx context.Context, c *caller, _ *mcp.CallToolRequest, in feedbackIn) (*mcp.CallToolResult, feedbackOut, error) {
	f, err := h.deps.Chat.Rate(ctx, c.p, in.MessageID, chat.FeedbackInput{Rating: in.Rating, Comment: in.Comment})
	if err != nil {
		return nil, feedbackOut{}, err
	}
	return nil, feedbackOut{ID: f.ID, MessageID: f.MessageID, ConversationID: f.ConversationID, Rating: f.Rating,
		Comment: f.Comment, UpdatedAt: f.UpdatedAt}, nil
}
