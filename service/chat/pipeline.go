package chat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
)

const defaultSystemPrompt = `You are ragent, a helpful assistant that answers questions about the company's documents.
Answer in the language of the question. Use only the numbered sources below when they are relevant,
and cite them with markers like [1] or [2] right after the statements they support.
If the sources do not contain the answer, say so plainly instead of guessing.`

const noSourcesPrompt = `You are ragent, a helpful assistant. No relevant company documents were found for this
question, so answer from general knowledge, say clearly that no sources were found, and do not invent citations.
Answer in the language of the question.`

const plainChatPrompt = `You are ragent, a helpful assistant. Answer in the language of the question.`

// prepare runs the pipeline up to the prompt: history, term mappings,
// rewrite, intent routing, retrieval (emitting sources). A nil request with
// a nil error means the turn was answered without the model.
func (t *turn) prepare(ctx context.Context) (*service.ChatRequest, error) {
	s := t.s
	history, err := t.history(ctx)
	if err != nil {
		return nil, err
	}
	history = newestWithin(history, service.MaxHistoryRunes)

	question := t.req.mapped
	if s.d.FastModel != nil && len(history) > 0 {
		rctx, span := s.span(ctx, "chat.rewrite")
		question = t.rewrite(rctx, history, question)
		span.End()
	}

	var (
		kbIDs  = t.req.KnowledgeBaseIDs
		intent *service.IntentNode
	)
	if len(kbIDs) == 0 && s.d.Intents != nil {
		readable, err := s.d.Access.Roles(ctx, t.p, nil)
		if err != nil {
			return nil, err
		}
		ictx, span := s.span(ctx, "chat.intent")
		matched := t.classify(ictx, question, readable)
		span.End()
		if len(matched) > 0 {
			intent = matched[0]
		}
		if intent != nil && intent.Kind == service.IntentSystem {
			return t.request(plainChatPrompt, intent, history, question, nil), nil
		}
		kbIDs = routeKnowledgeBases(matched, readable)
	}

	q := retrieve.Query{Text: question, KnowledgeBaseIDs: kbIDs, TopK: s.cfg.TopK, Mode: service.SearchHybrid}
	found, err := s.d.Retriever.Run(ctx, t.p, q)
	if errors.Is(err, service.ErrNotFound) && len(t.req.KnowledgeBaseIDs) == 0 && len(kbIDs) > 0 {
		// An intent's knowledge base was deleted (or unshared) since the
		// routing read access: search every one the user may read.
		t.log.WarnContext(ctx, "an intent routes to a missing knowledge base; searching all", "err", err)
		q.KnowledgeBaseIDs = nil
		found, err = s.d.Retriever.Run(ctx, t.p, q)
	}
	if found.Searched != nil {
		t.kbIDs = found.Searched
	}
	if err != nil {
		return nil, fmt.Errorf("retrieve: %w", err)
	}
	results := found.Results
	t.sources = make([]service.Source, len(results))
	for i, r := range results {
		t.sources[i] = service.Source{
			Index: i + 1, DocumentID: r.DocumentID, DocumentName: r.DocumentName, ChunkID: r.ChunkID,
			Score: r.Score, Excerpt: excerpt(withoutHeadings(r.Content, r.Section), 240), Content: r.Content,
		}
	}
	t.send(EventSources, Sources{Sources: t.sources})

	if len(t.sources) == 0 {
		if s.cfg.RefuseWithoutSources {
			t.content.WriteString(NoSourcesAnswer)
			t.send(EventMessage, Message{Type: service.DeltaResponse, Delta: NoSourcesAnswer})
			return nil, nil
		}
		return t.request(noSourcesPrompt, intent, history, question, nil), nil
	}
	return t.request(defaultSystemPrompt, intent, history, question, t.sources), nil
}

// mapTerms sets req.mapped to the question after term mappings. The
// mapped question is what is searched and answered, so it must fit
// service.MaxQuestionRunes too; it is checked here, before anything is
// saved, so a refused question leaves no trace.
func (s *Service) mapTerms(ctx context.Context, req *Request) error {
	req.mapped = req.Question
	if s.d.Terms == nil {
		return nil
	}
	mappings, err := s.d.Terms.TermMappings(ctx)
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "term mappings unavailable; question left as asked", "err", err)
		return nil
	}
	req.mapped = service.ApplyTermMappings(req.Question, mappings)
	if n := utf8.RuneCountInString(req.mapped); n > service.MaxQuestionRunes {
		return service.Errorf(service.ErrInvalid, "question must be at most %d characters after term mappings (it has %d once mapped)", service.MaxQuestionRunes, n)
	}
	return nil
}

// usableHistory drops the question just saved and failed or rejected
// replies, and keeps the last n messages.
func usableHistory(msgs []service.Message, questionID service.ID, n int) []service.Message {
	out := msgs[:0:0]
	for _, m := range msgs {
		if m.ID == questionID || m.Status == service.MessageRejected || m.Status == service.MessageFailed || m.Content == "" {
			continue
		}
		out = append(out, m)
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// request builds the prompt: instructions (the intent's template when it has
// one) with the numbered sources, the history, then the question alone in
// the last message.
func (t *turn) request(system string, intent *service.IntentNode, history []service.Message, question string, sources []service.Source) *service.ChatRequest {
	if intent != nil && strings.TrimSpace(intent.PromptTemplate) != "" {
		system = intent.PromptTemplate
	}
	var b strings.Builder
	b.WriteString(system)
	if len(sources) > 0 {
		b.WriteString("\n\nSources:\n")
		for _, src := range sources {
			fmt.Fprintf(&b, "\n[%d] %s\n%s\n", src.Index, src.DocumentName, src.Content)
		}
	}
	if t.req.Instructions != "" {
		b.WriteString("\n\nInstructions from the client application:\n")
		b.WriteString(t.req.Instructions)
	}
	msgs := []service.ChatMessage{{Role: service.ChatSystem, Content: b.String()}}
	for _, m := range history {
		msgs = append(msgs, service.ChatMessage{Role: m.Role, Content: m.Content})
	}
	msgs = append(msgs, service.ChatMessage{Role: service.ChatUser, Content: question})
	maxTokens := t.s.cfg.MaxAnswerTokens
	if t.req.MaxTokens != nil {
		maxTokens = *t.req.MaxTokens
	}
	return &service.ChatRequest{
		Model: t.s.cfg.AnswerModel, Messages: msgs, Thinking: t.req.DeepThinking, Sources: sources, Temperature: 0.3,
		MaxTokens: maxTokens,
	}
}

// newestWithin keeps the newest messages of history whose contents fit in
// runes characters together.
func newestWithin(history []service.Message, runes int) []service.Message {
	i := len(history)
	for ; i > 0; i-- {
		n := utf8.RuneCountInString(history[i-1].Content)
		if n > runes {
			break
		}
		runes -= n
	}
	return history[i:]
}

const rewritePrompt = `Rewrite the user's last question into one standalone question that can be understood
without the conversation. Keep its language and every specific term. Reply with the question only.`

// rewrite turns a follow-up into a standalone question with the fast model;
// any failure keeps the question as it is.
func (t *turn) rewrite(ctx context.Context, history []service.Message, question string) string {
	var conv strings.Builder
	for _, m := range history {
		fmt.Fprintf(&conv, "%s: %s\n", m.Role, excerpt(m.Content, 500))
	}
	fmt.Fprintf(&conv, "user: %s", question)
	out, err := t.complete(ctx, service.UsageRewrite, service.ChatRequest{
		Model: t.s.cfg.FastModel, MaxTokens: 200,
		Messages: []service.ChatMessage{{Role: service.ChatSystem, Content: rewritePrompt}, {Role: service.ChatUser, Content: conv.String()}},
	})
	out = strings.TrimSpace(out)
	if n := utf8.RuneCountInString(out); err != nil || out == "" || n > 4*utf8.RuneCountInString(question)+200 || n > service.MaxQuestionRunes {
		if err != nil && ctx.Err() == nil {
			t.log.WarnContext(ctx, "rewrite failed; using the question as asked", "err", err)
		}
		return question
	}
	return out
}

// complete collects a whole answer of a model (for rewrite, intent, title).
func (t *turn) complete(ctx context.Context, kind service.UsageKind, req service.ChatRequest) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var b strings.Builder
	usage, err := t.s.d.FastModel.Stream(t.call(ctx, kind), req, func(d service.Delta) error {
		if d.Kind == service.DeltaResponse {
			b.WriteString(d.Text)
		}
		return nil
	})
	t.usage.PromptTokens += usage.PromptTokens
	t.usage.CompletionTokens += usage.CompletionTokens
	t.usage.TotalTokens += usage.TotalTokens
	return b.String(), err
}

const titlePrompt = `Write a short title (at most 20 characters, no quotes, no punctuation at the end) for a
conversation that starts with the user's question below. Use the question's language. Reply with the title only.`

// title names a new conversation: by the fast model when there is one, else
// the first 30 characters of the question.
func (t *turn) title(ctx context.Context) string {
	fallback := excerpt(t.req.Question, 30)
	if t.s.d.FastModel == nil || ctx.Err() != nil {
		return fallback
	}
	out, err := t.complete(ctx, service.UsageTitle, service.ChatRequest{
		Model: t.s.cfg.FastModel, MaxTokens: 40,
		Messages: []service.ChatMessage{{Role: service.ChatSystem, Content: titlePrompt}, {Role: service.ChatUser, Content: t.req.Question}},
	})
	out = strings.Trim(strings.TrimSpace(out), `"'“”「」《》`)
	if err != nil || out == "" {
		return fallback
	}
	return excerpt(out, 30)
}

// withoutHeadings drops the heading lines a section's first chunk opens
// with: the sources panel shows the document and section already.
func withoutHeadings(content, section string) string {
	if section == "" {
		return content
	}
	headings := map[string]bool{}
	for _, h := range strings.Split(section, service.SectionSeparator) {
		headings[strings.TrimSpace(h)] = true
	}
	rest := content
	for rest != "" {
		line, after, _ := strings.Cut(rest, "\n")
		if !headings[strings.TrimSpace(line)] {
			break
		}
		rest = after
	}
	if strings.TrimSpace(rest) == "" {
		return content
	}
	return rest
}

// excerpt cuts s to n runes on one line.
func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:n])) + "…"
}
