package service

import (
	"context"
	"fmt"
	"time"
)

// UsageKind says what a model call was for (docs/usage-and-quotas.md "Usage and quotas").
type UsageKind string

const (
	UsageAnswer    UsageKind = "answer"    // the streamed answer of a chat turn
	UsageRewrite   UsageKind = "rewrite"   // a follow-up made standalone
	UsageIntent    UsageKind = "intent"    // intent scoring
	UsageTitle     UsageKind = "title"     // a new conversation's title
	UsageRerank    UsageKind = "rerank"    // the reranker
	UsageEmbedding UsageKind = "embedding" // questions and passages
	// UsageRequest is no model call: one admitted chat, OpenAI-compatible
	// call or search, which request quotas count.
	UsageRequest UsageKind = "request"
)

// UsageKinds lists the kinds, in the order reports show them.
var UsageKinds = []UsageKind{UsageAnswer, UsageRewrite, UsageIntent, UsageTitle, UsageRerank, UsageEmbedding, UsageRequest}

// UsageRecord is what one model call (or one admitted request) spent.
type UsageRecord struct {
	// CallID identifies the call: a call retried (a redelivered ingestion,
	// a replayed flush) carries the same id and is recorded once.
	CallID           string
	At               time.Time
	UserID           ID // 0: nobody (ragent's own work)
	KeyID            ID // 0: not through an API key
	KnowledgeBaseID  ID // 0: none, or several
	Model            string
	Kind             UsageKind
	PromptTokens     int
	CompletionTokens int
	Requests         int
	// Estimated says the tokens were counted by ragent, not reported by
	// the provider.
	Estimated bool
}

// Tokens is the record's prompt plus completion tokens.
func (r UsageRecord) Tokens() int64 { return int64(r.PromptTokens) + int64(r.CompletionTokens) }

// UsageScope is who a model call is spent for when no principal says so
// (ingestion works for the document's uploader) and which knowledge base.
type UsageScope struct {
	UserID          ID
	KeyID           ID
	KnowledgeBaseID ID
}

// UsageCall names the model call a context is about to make: its kind and
// the stable id that makes a retry count once ("" for a fresh id).
type UsageCall struct {
	Kind UsageKind
	ID   string
}

var (
	usageScopeKey = ctxKey[UsageScope]{"usage scope"}
	usageCallKey  = ctxKey[UsageCall]{"usage call"}
)

// WithUsageScope returns ctx whose model calls are spent for scope.
func WithUsageScope(ctx context.Context, scope UsageScope) context.Context {
	return usageScopeKey.with(ctx, scope)
}

// UsageScopeFrom returns whom ctx's model calls are spent for: its usage
// scope when one was set, else its principal (and API key).
func UsageScopeFrom(ctx context.Context) UsageScope {
	if s, ok := usageScopeKey.from(ctx); ok {
		return s
	}
	var s UsageScope
	if p, ok := PrincipalFrom(ctx); ok {
		s.UserID = p.UserID
		if p.Key != nil {
			s.KeyID = p.Key.KeyID
		}
	}
	return s
}

// WithUsageCall returns ctx whose next model call is call.
func WithUsageCall(ctx context.Context, call UsageCall) context.Context {
	return usageCallKey.with(ctx, call)
}

// UsageCallFrom returns the call ctx names, if any.
func UsageCallFrom(ctx context.Context) (UsageCall, bool) { return usageCallKey.from(ctx) }

// QuotaSubject is what a quota limits: a user, a group (its members'
// usage, shared) or an API key.
type QuotaSubject string

const (
	QuotaUser  QuotaSubject = "user"
	QuotaGroup QuotaSubject = "group"
	QuotaKey   QuotaSubject = "key"
)

// Valid reports whether s is a known subject.
func (s QuotaSubject) Valid() bool { return s == QuotaUser || s == QuotaGroup || s == QuotaKey }

// Quota limits one subject's tokens and requests per UTC day and month;
// 0 means no limit.
type Quota struct {
	Subject         QuotaSubject `json:"subject"`
	SubjectID       ID           `json:"subjectId"`
	DailyTokens     int64        `json:"dailyTokens"`
	MonthlyTokens   int64        `json:"monthlyTokens"`
	DailyRequests   int64        `json:"dailyRequests"`
	MonthlyRequests int64        `json:"monthlyRequests"`
	UpdatedAt       time.Time    `json:"updatedAt"`
}

// MaxQuota bounds every limit of a quota (a typo of a few more digits is
// refused rather than read as "unlimited").
const MaxQuota = int64(1) << 50

// Validate checks the subject and the limits.
func (q *Quota) Validate() error {
	if !q.Subject.Valid() {
		return Errorf(ErrInvalid, "subject must be user, group or key")
	}
	if q.SubjectID == 0 {
		return Errorf(ErrInvalid, "subjectId is required")
	}
	for name, v := range map[string]int64{"dailyTokens": q.DailyTokens, "monthlyTokens": q.MonthlyTokens,
		"dailyRequests": q.DailyRequests, "monthlyRequests": q.MonthlyRequests} {
		if v < 0 || v > MaxQuota {
			return Errorf(ErrInvalid, "%s must be between 0 (no limit) and %d", name, MaxQuota)
		}
	}
	return nil
}

// Empty reports whether q limits nothing.
func (q *Quota) Empty() bool {
	return q.DailyTokens == 0 && q.MonthlyTokens == 0 && q.DailyRequests == 0 && q.MonthlyRequests == 0
}

// QuotaPeriod is a day or a month, in UTC.
type QuotaPeriod string

const (
	QuotaDaily   QuotaPeriod = "day"
	QuotaMonthly QuotaPeriod = "month"
)

// Start returns the start of the period holding t (UTC).
func (p QuotaPeriod) Start(t time.Time) time.Time {
	t = t.UTC()
	if p == QuotaMonthly {
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// End returns when the period holding t ends: when its quota resets.
func (p QuotaPeriod) End(t time.Time) time.Time {
	s := p.Start(t)
	if p == QuotaMonthly {
		return s.AddDate(0, 1, 0)
	}
	return s.AddDate(0, 0, 1)
}

// Label names the period holding t, as counters are keyed: 20261202 or 202612.
func (p QuotaPeriod) Label(t time.Time) string {
	if p == QuotaMonthly {
		return p.Start(t).Format("200601")
	}
	return p.Start(t).Format("20060102")
}

// QuotaExceeded describes a refusal: which quota, what it allows, and
// when it resets.
type QuotaExceeded struct {
	Subject   QuotaSubject
	SubjectID ID
	Period    QuotaPeriod
	Metric    string // "tokens" or "requests"
	Limit     int64
	Used      int64
	ResetsAt  time.Time
}

// Err is the refusal as a domain error: ErrQuotaExceeded with the quota in
// its details and Retry-After until it resets.
func (q QuotaExceeded) Err(now time.Time) error {
	return &Error{Kind: ErrQuotaExceeded,
		Message: fmt.Sprintf("the %s's %s quota of %d %s is used up; it resets at %s",
			q.Subject, dailyOrMonthly(q.Period), q.Limit, q.Metric, q.ResetsAt.Format(time.RFC3339)),
		Details: map[string]string{
			"subject": string(q.Subject), "subjectId": q.SubjectID.String(), "period": string(q.Period),
			"metric": q.Metric, "limit": fmt.Sprint(q.Limit), "used": fmt.Sprint(q.Used),
			"resetsAt": q.ResetsAt.Format(time.RFC3339),
		},
		RetryAfter: max(q.ResetsAt.Sub(now), time.Second),
	}
}

func dailyOrMonthly(p QuotaPeriod) string {
	if p == QuotaMonthly {
		return "monthly"
	}
	return "daily"
}

// QuotaCounter names one subject's counter for one period.
type QuotaCounter struct {
	Subject QuotaSubject
	ID      ID
	Period  QuotaPeriod
	Label   string        // the period, e.g. 20261202
	TTL     time.Duration // how long the counter outlives its period's start
}

// QuotaCount is a counter's state. Seeded says it holds the usage stored before
// it was created (Seed); until then it counts only what followed.
type QuotaCount struct {
	Requests, Tokens int64
	Seeded           bool
}

// UsageGroupBy is a dimension a usage report groups by.
type UsageGroupBy string

const (
	UsageByUser  UsageGroupBy = "user"
	UsageByGroup UsageGroupBy = "group"
	UsageByKey   UsageGroupBy = "key"
	UsageByModel UsageGroupBy = "model"
	UsageByDay   UsageGroupBy = "day"
	UsageByKind  UsageGroupBy = "kind"
	UsageByKB    UsageGroupBy = "knowledgeBase"
)

// Valid reports whether g is a known dimension.
func (g UsageGroupBy) Valid() bool {
	switch g {
	case UsageByUser, UsageByGroup, UsageByKey, UsageByModel, UsageByDay, UsageByKind, UsageByKB:
		return true
	}
	return false
}

// UsageQuery selects usage: the days [From, To] (UTC dates), optionally
// one user, grouped by the dimensions in GroupBy.
type UsageQuery struct {
	From, To time.Time
	UserID   ID // 0: everyone (admins only)
	GroupBy  []UsageGroupBy
	Limit    int
}

// UsageRow is one group of a usage report; the dimensions not grouped by
// are empty.
type UsageRow struct {
	Day              string    `json:"day,omitempty"`
	UserID           ID        `json:"userId,omitempty"`
	Username         string    `json:"username,omitempty"`
	GroupID          ID        `json:"groupId,omitempty"`
	GroupName        string    `json:"groupName,omitempty"`
	KeyID            ID        `json:"keyId,omitempty"`
	KeyName          string    `json:"keyName,omitempty"`
	KnowledgeBaseID  ID        `json:"knowledgeBaseId,omitempty"`
	Model            string    `json:"model,omitempty"`
	Kind             UsageKind `json:"kind,omitempty"`
	Calls            int64     `json:"calls"`
	Requests         int64     `json:"requests"`
	PromptTokens     int64     `json:"promptTokens"`
	CompletionTokens int64     `json:"completionTokens"`
	TotalTokens      int64     `json:"totalTokens"`
	EstimatedTokens  int64     `json:"estimatedTokens"`
}
