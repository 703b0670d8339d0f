package service

// Input limits the use cases enforce. The web UI's forms read the same
// numbers from GET /api/v1/limits (InputLimits), so a form never accepts
// what the server refuses, nor refuses what it accepts.
const (
	MaxNameRunes        = 100  // knowledge base, group and intent names
	MaxDescriptionRunes = 2000 // their descriptions
	MinChunkSize        = 64   // tokens per chunk of a knowledge base
	MaxChunkSize        = 4096
	MaxSourceTermRunes  = 100 // the phrase a term mapping replaces
	MaxTargetTermRunes  = 200 // what it is replaced with
	// MaxHistoryMessageRunes bounds one earlier message a client sends with
	// its question (the OpenAI-compatible API), and MaxInstructionRunes the
	// client's own system instructions there.
	MaxHistoryMessageRunes = 16000
	MaxInstructionRunes    = 8000
	// MaxHistoryRunes bounds the history the model sees in total, stored
	// (/api/v1/chat) or sent by the client: the newest messages that fit.
	MaxHistoryRunes = 32000
)

// Limits is the JSON shape of the input limits.
type Limits struct {
	NameRunes        int `json:"nameRunes"`
	DescriptionRunes int `json:"descriptionRunes"`
	ChunkSizeMin     int `json:"chunkSizeMin"`
	ChunkSizeMax     int `json:"chunkSizeMax"`
	SourceTermRunes  int `json:"sourceTermRunes"`
	TargetTermRunes  int `json:"targetTermRunes"`
	QuestionRunes    int `json:"questionRunes"`
}

// InputLimits are the limits above, as served to clients.
var InputLimits = Limits{
	NameRunes: MaxNameRunes, DescriptionRunes: MaxDescriptionRunes,
	ChunkSizeMin: MinChunkSize, ChunkSizeMax: MaxChunkSize,
	SourceTermRunes: MaxSourceTermRunes, TargetTermRunes: MaxTargetTermRunes,
	QuestionRunes: MaxQuestionRunes,
}
