package service

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Answer feedback (README "Answer feedback"): a user rates an answer they
// can see, up or down with an optional comment; admins read the ratings
// with the question, answer and sources, mark the chunks that should have
// been found, and export the downvoted questions as an evaluation set.

// Rating is a thumbs up or down.
type Rating string

const (
	RatingUp   Rating = "up"
	RatingDown Rating = "down"
)

// Valid reports whether r is up or down.
func (r Rating) Valid() bool { return r == RatingUp || r == RatingDown }

// MaxFeedbackComment is the longest comment, in characters.
const MaxFeedbackComment = 2000

// MaxRelevantChunks is how many chunks an admin may mark as right for one
// answer.
const MaxRelevantChunks = 50

// Feedback is one user's rating of one answer. The admin listing fills in
// the question, the answer and its sources.
type Feedback struct {
	ID               ID        `json:"id"`
	MessageID        ID        `json:"messageId"`
	ConversationID   ID        `json:"conversationId"`
	UserID           ID        `json:"userId"`
	Username         string    `json:"username,omitempty"`
	Rating           Rating    `json:"rating"`
	Comment          string    `json:"comment"`
	KnowledgeBaseIDs []ID      `json:"knowledgeBaseIds"`
	RelevantChunkIDs []ID      `json:"relevantChunkIds"`
	CreatedAt        time.Time `json:"createdAt"`
	UpdatedAt        time.Time `json:"updatedAt"`

	Question string   `json:"question,omitempty"`
	Answer   string   `json:"answer,omitempty"`
	Sources  []Source `json:"sources,omitempty"`
}

// FeedbackFilter selects feedback for the admin page and the export; zero
// fields match everything. Newest first; Before pages (ids below it).
type FeedbackFilter struct {
	KnowledgeBaseID ID
	Rating          Rating
	Since, Until    time.Time
	// Judged keeps only feedback with chunks marked as right.
	Judged bool
	Before ID
	Limit  int
}

// CheckComment trims a feedback comment and refuses one that is too long
// or not text.
func CheckComment(s string) (string, error) {
	s = strings.TrimSpace(s)
	switch {
	case !utf8.ValidString(s) || strings.ContainsRune(s, 0):
		return "", Errorf(ErrInvalid, "comment must be UTF-8 text without NUL characters")
	case utf8.RuneCountInString(s) > MaxFeedbackComment:
		return "", Errorf(ErrTooLarge, "comment is %d characters; at most %d", utf8.RuneCountInString(s), MaxFeedbackComment)
	}
	return s, nil
}

// EvalSet is a BEIR evaluation set: documents, queries and judgements
// (`ragent eval --dataset` reads it as corpus.jsonl, queries.jsonl and
// qrels/test.tsv).
type EvalSet struct {
	Corpus  []EvalDocument
	Queries []EvalQuery
	Qrels   []EvalJudgement
}

// EvalDocument is a corpus line.
type EvalDocument struct {
	ID    string `json:"_id"`
	Title string `json:"title"`
	Text  string `json:"text"`
}

// EvalQuery is a queries line.
type EvalQuery struct {
	ID   string `json:"_id"`
	Text string `json:"text"`
}

// EvalJudgement is a qrels row: the document is relevant to the query.
type EvalJudgement struct {
	QueryID, CorpusID string
	Score             int
}

// Write writes the set as BEIR's three files, each through the writer
// create returns for its path ("corpus.jsonl", "queries.jsonl",
// "qrels/test.tsv"): to a folder (`ragent eval export-feedback`) or a zip
// (the admin page's button).
func (s *EvalSet) Write(create func(path string) (io.Writer, error)) error {
	jsonl := func(path string, n int, line func(i int) any) error {
		w, err := create(path)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(w)
		for i := range n {
			if err := enc.Encode(line(i)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := jsonl("corpus.jsonl", len(s.Corpus), func(i int) any { return s.Corpus[i] }); err != nil {
		return err
	}
	if err := jsonl("queries.jsonl", len(s.Queries), func(i int) any { return s.Queries[i] }); err != nil {
		return err
	}
	w, err := create("qrels/test.tsv")
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("query-id\tcorpus-id\tscore\n")
	for _, q := range s.Qrels {
		fmt.Fprintf(&b, "%s\t%s\t%d\n", q.QueryID, q.CorpusID, q.Score)
	}
	_, err = io.WriteString(w, b.String())
	return err
}
