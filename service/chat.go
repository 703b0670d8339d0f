package service

import (
	"context"
	"time"
)

// MaxQuestionRunes is the longest question, in characters, that chat and
// search accept: one limit, so whatever chat accepts retrieval accepts too.
// Chat applies it to the question as asked and again after term mappings
// (a mapping may lengthen it); a question too long once mapped is refused
// with ErrInvalid before anything is saved, never truncated, so what is
// searched and answered is always the whole question.
const MaxQuestionRunes = 4000

// Conversation is a chat thread of one user.
type Conversation struct {
	ID        ID        `json:"id"`
	UserID    ID        `json:"userId"`
	Title     string    `json:"title"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// ChatSubmit is a chat turn written under its client's Idempotency-Key:
// the database's unique key behind the Redis submit lock, so a retried
// submit that a lost lock let through follows the original turn instead of
// writing a second conversation or question.
type ChatSubmit struct {
	UserID         ID
	Key            string
	ConversationID ID
	MessageID      ID // the question
	TaskID         ID
	// AnswerStatus is the saved answer's status; "" while none is saved
	// (the turn runs, or the instance that ran it died).
	AnswerStatus MessageStatus
	// Replaces, when a submit is written, is the question of a failed or
	// cancelled attempt under the same key that this one retries; the
	// write fails with ErrDuplicateRequest when another retry took it over.
	Replaces ID
}

// MessageStatus is how a chat turn ended.
type MessageStatus string

const (
	MessageCompleted MessageStatus = "completed"
	MessageRejected  MessageStatus = "rejected"
	MessageCancelled MessageStatus = "cancelled"
	MessageFailed    MessageStatus = "failed"
)

// ChatRole says who speaks a message: the user or the assistant in a
// conversation, the system too in a prompt.
type ChatRole string

const (
	ChatSystem    ChatRole = "system"
	ChatUser      ChatRole = "user"
	ChatAssistant ChatRole = "assistant"
)

// Message is one turn of a conversation.
type Message struct {
	ID             ID            `json:"id"`
	ConversationID ID            `json:"conversationId"`
	Role           ChatRole      `json:"role"` // ChatUser or ChatAssistant
	Content        string        `json:"content"`
	Thinking       string        `json:"thinking,omitempty"`
	Status         MessageStatus `json:"status"`
	Sources        []Source      `json:"sources,omitempty"` // the cited sources of an answer
	ReplyTo        ID            `json:"replyTo,omitempty"`
	Usage          Usage         `json:"usage"`
	LatencyMS      int64         `json:"latencyMs"`
	CreatedAt      time.Time     `json:"createdAt"`
	// KnowledgeBaseIDs are the knowledge bases the message's turn searched
	// (those it named, when it searched none); nil when unknown (messages
	// stored before ragent recorded them). They decide what a limited API
	// key sees of history (KeyGrant.Within).
	KnowledgeBaseIDs []ID `json:"-"`
}

// Source is a numbered piece of evidence an answer cites as [Index].
type Source struct {
	Index        int     `json:"index"`
	DocumentID   ID      `json:"documentId"`
	DocumentName string  `json:"documentName"`
	ChunkID      ID      `json:"chunkId"`
	Score        float64 `json:"score"`
	Excerpt      string  `json:"excerpt"`
	Content      string  `json:"-"` // the full chunk, given to the model
}

// Usage counts LLM tokens.
type Usage struct {
	PromptTokens     int `json:"promptTokens"`
	CompletionTokens int `json:"completionTokens"`
	TotalTokens      int `json:"totalTokens"`
	// Estimated says ragent counted the tokens: the provider reported none.
	Estimated bool `json:"-"`
}

// ChatMessage is one message of an LLM prompt.
type ChatMessage struct {
	Role    ChatRole `json:"role"`
	Content string   `json:"content"`
}

// ChatRequest asks a model for a completion.
type ChatRequest struct {
	Model       string
	Messages    []ChatMessage
	Temperature float64
	MaxTokens   int
	Thinking    bool // ask for reasoning when the model supports it
	JSON        bool // ask for a JSON object answer
	// Sources are the numbered sources the prompt cites. Models read them in
	// the prompt; the offline provider, which cannot read, answers from them.
	Sources []Source
}

// DeltaKind tells reasoning from answer text.
type DeltaKind string

const (
	DeltaThink    DeltaKind = "think"
	DeltaResponse DeltaKind = "response"
)

// Delta is a streamed piece of a completion.
type Delta struct {
	Kind DeltaKind
	Text string
}

// ChatModel streams completions. Stream calls onDelta for each piece in
// order and returns the usage when the model finishes; cancelling ctx aborts
// the upstream request.
type ChatModel interface {
	Stream(ctx context.Context, req ChatRequest, onDelta func(Delta) error) (Usage, error)
}

// EmbedKind says what texts are embedded for: asymmetric models embed a
// question and the passage that answers it differently.
type EmbedKind uint8

const (
	EmbedDocument EmbedKind = iota // passages stored in a knowledge base
	EmbedQuery                     // a search question
)

// Embedder turns texts into vectors of a fixed dimension.
type Embedder interface {
	Embed(ctx context.Context, kind EmbedKind, texts []string) ([][]float32, error)
	Model() string
	Dim() int
}

// TaskEvent is one event of a chat task's stream as kept for a client that
// resumes it: its place in the stream (the SSE id, from 1), its name and
// its JSON payload (empty for done).
type TaskEvent struct {
	ID   int
	Name string
	Data []byte
}

// TaskReader says who may read a task's events again: its owner, through a
// grant that reaches KnowledgeBaseIDs (KeyGrant.Within; nil when the turn
// could search any knowledge base its owner reads).
type TaskReader struct {
	Owner            ID
	KnowledgeBaseIDs []ID
	// Visitor, for a widget visitor's turn, is the visitor (Principal.
	// Visitor), the only one who reads it again.
	Visitor string
}
