package chat

import "github.com/ragent-go/ragent/service"

// Event is one event of the stream (DESIGN §6): its name and its payload,
// one of the types below (nil for done, written as the raw text [DONE]).
// Fields are in the alphabetical order of their JSON names, the order the
// stream has always had. web/events_test.go checks web/static/chat-stream.js
// handles the same names.
type Event struct {
	// ID is the event's place in its task's stream, from 1: the SSE id a
	// client resumes after (Service.Events).
	ID   int
	Name string
	Data any
}

// Event names.
const (
	EventMeta    = "meta"
	EventQueue   = "queue"
	EventSources = "sources"
	EventMessage = "message"
	EventReject  = "reject"
	EventCancel  = "cancel"
	EventError   = "error"
	EventFinish  = "finish"
	EventDone    = "done"
)

// EventNames lists every event name, in protocol order.
var EventNames = []string{EventMeta, EventQueue, EventSources, EventMessage, EventReject, EventCancel, EventError, EventFinish, EventDone}

// Meta is always first, before any queueing.
type Meta struct {
	ConversationID service.ID `json:"conversationId"`
	MessageID      service.ID `json:"messageId"`
	TaskID         service.ID `json:"taskId"`
}

// Queue is the request's place in line while it waits for an LLM slot
// (Waiting "slot") or, holding one, for room in a model endpoint's
// requests or tokens per minute (Waiting "budget").
type Queue struct {
	Position int    `json:"position"`
	Queued   int    `json:"queued"`
	Waiting  string `json:"waiting,omitempty"`
}

// Sources are the retrieved chunks the answer may cite.
type Sources struct {
	Sources []service.Source `json:"sources"`
}

// Message is a piece of the answer: its reasoning (service.DeltaThink,
// sent only to a deep-thinking chat) or its text (service.DeltaResponse).
type Message struct {
	Delta string            `json:"delta"`
	Type  service.DeltaKind `json:"type"`
}

// Cancel says the generation stopped; Reason is one of the Reason constants.
type Cancel struct {
	Reason string `json:"reason"`
}

// Error says the pipeline failed; Code is service.CodeOf the failure.
// RetryAfter (seconds), on a busy reject, is the queue's estimate of when a
// new request may find room.
type Error struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter int    `json:"retryAfter,omitempty"`
}

// Reject refuses a request before any model call, shaped like Error.
type Reject Error

// Finish ends every stream. Saved is false (and only then present) when a
// refused first question left no conversation behind.
type Finish struct {
	MessageID service.ID            `json:"messageId"`
	Saved     *bool                 `json:"saved,omitempty"`
	Status    service.MessageStatus `json:"status"`
	Title     string                `json:"title,omitempty"`
	Usage     *service.Usage        `json:"usage,omitempty"`
}

// Cancel reasons.
const (
	ReasonUser       = "user"
	ReasonDisconnect = "disconnect"
	ReasonShutdown   = "shutdown"
)
