package usage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Store keeps quotas and answers usage questions.
type Store interface {
	Quotas(ctx context.Context) ([]service.Quota, error)
	PutQuota(ctx context.Context, q *service.Quota) error
	DeleteQuota(ctx context.Context, subject service.QuotaSubject, id service.ID) error
	// QuotaSubjectExists returns service.ErrNotFound for an unknown user,
	// group or API key.
	QuotaSubjectExists(ctx context.Context, subject service.QuotaSubject, id service.ID) error
	// GroupsOfUsers returns, for each member of the groups, its groups among them.
	GroupsOfUsers(ctx context.Context, groupIDs []service.ID) (map[service.ID][]service.ID, error)
	// UsageSum totals a subject's tokens and requests since from.
	UsageSum(ctx context.Context, subject service.QuotaSubject, id service.ID, from time.Time) (tokens, requests int64, err error)
	UsageReport(ctx context.Context, q service.UsageQuery) ([]service.UsageRow, error)
}

// Counters are the shared quota counters (Redis): every instance admits
// against the same numbers.
type Counters interface {
	// Admit counts one request on each key and returns the quotas'
	// version and each key's count after it, in one round trip.
	Admit(ctx context.Context, keys []service.QuotaCounter) (version int64, counts []service.QuotaCount, err error)
	// Release takes back the request Admit counted (a refused request).
	Release(ctx context.Context, keys []service.QuotaCounter) error
	// Seed adds stored usage to a counter not yet seeded (once, whichever
	// instance comes first) and returns its count.
	Seed(ctx context.Context, key service.QuotaCounter, tokens, requests int64) (service.QuotaCount, error)
	// AddTokens adds tokens to the seeded counters among keys.
	AddTokens(ctx context.Context, adds map[service.QuotaCounter]int64) error
	// BumpVersion tells every instance that the quotas changed.
	BumpVersion(ctx context.Context) error
}

// QuotasConfig tunes Quotas.
type QuotasConfig struct {
	// Enabled turns quota checks on; off, requests are still recorded.
	Enabled bool
	// Refresh bounds how stale the cached quotas and group memberships
	// may be (a quota change is seen at once, through the version; a
	// membership change within Refresh). Default 10s.
	Refresh time.Duration
	Logger  *slog.Logger
	Now     func() time.Time
	// Refused counts refusals by subject and metric; nil counts nothing.
	Refused func(subject service.QuotaSubject, metric string)
}

// Quotas manages and enforces quotas and answers usage reports.
type Quotas struct {
	store    Store
	counters Counters
	meter    *Meter
	audit    *service.Auditor
	cfg      QuotasConfig

	mu   sync.Mutex
	snap *snapshot
}

// snapshot is the quotas as one instance caches them.
type snapshot struct {
	version int64
	loaded  time.Time
	quotas  map[subjectRef]service.Quota
	groups  map[service.ID][]service.ID // user → groups with a quota
}

type subjectRef struct {
	kind service.QuotaSubject
	id   service.ID
}

// NewQuotas returns the quota use case; it records admitted requests in
// meter and has meter mirror stored usage into the counters.
func NewQuotas(store Store, counters Counters, meter *Meter, audit *service.Auditor, cfg QuotasConfig) *Quotas {
	cfg.Refresh = cmp.Or(max(cfg.Refresh, 0), 10*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	q := &Quotas{store: store, counters: counters, meter: meter, audit: audit, cfg: cfg}
	meter.mirror = q
	return q
}

// Admit lets a chat, an OpenAI-compatible call or a search in, or refuses
// it with service.ErrQuotaExceeded when one of the caller's quotas (their
// own, a group's, their API key's) is used up. Tokens count against a
// quota once spent, so a running answer finishes even if it crosses its
// quota; the next request is refused. When the counters cannot be reached
// the request is let in (quotas are budgets, not a security boundary) and
// a warning logged. An admitted request is recorded.
func (q *Quotas) Admit(ctx context.Context, p service.Principal) error {
	scope := service.UsageScopeFrom(service.WithPrincipal(ctx, p))
	if q.cfg.Enabled {
		if err := q.check(ctx, scope); err != nil {
			return err
		}
	}
	q.meter.Record(service.UsageRecord{UserID: scope.UserID, KeyID: scope.KeyID, Kind: service.UsageRequest, Requests: 1})
	return nil
}

func (q *Quotas) check(ctx context.Context, scope service.UsageScope) error {
	now := q.cfg.Now()
	snap, err := q.snapshot(ctx, now, 0)
	if err != nil {
		q.cfg.Logger.WarnContext(ctx, "quotas unavailable; admitting the request", "err", err)
		return nil
	}
	keys := snap.keys(scope, now)
	version, counts, err := q.counters.Admit(ctx, keys)
	if err != nil {
		q.cfg.Logger.WarnContext(ctx, "quota counters unavailable; admitting the request", "err", err)
		return nil
	}
	if version != snap.version {
		// The quotas changed: count against the new ones instead.
		if err := q.counters.Release(ctx, keys); err != nil {
			q.cfg.Logger.WarnContext(ctx, "releasing quota counters failed", "err", err)
		}
		if snap, err = q.snapshot(ctx, now, version); err != nil {
			q.cfg.Logger.WarnContext(ctx, "quotas unavailable; admitting the request", "err", err)
			return nil
		}
		keys = snap.keys(scope, now)
		if _, counts, err = q.counters.Admit(ctx, keys); err != nil {
			q.cfg.Logger.WarnContext(ctx, "quota counters unavailable; admitting the request", "err", err)
			return nil
		}
	}
	var worst *service.QuotaExceeded
	for i, k := range keys {
		c := counts[i]
		if !c.Seeded {
			tokens, requests, err := q.store.UsageSum(ctx, k.Subject, k.ID, k.Period.Start(now))
			if err == nil {
				c, err = q.counters.Seed(ctx, k, tokens, requests)
			}
			if err != nil {
				q.cfg.Logger.WarnContext(ctx, "seeding a quota counter failed", "err", err, "subject", k.Subject, "id", k.ID)
			}
		}
		if ex := snap.exceeded(k, c, now); ex != nil && (worst == nil || ex.ResetsAt.After(worst.ResetsAt)) {
			worst = ex
		}
	}
	if worst == nil {
		return nil
	}
	if err := q.counters.Release(ctx, keys); err != nil {
		q.cfg.Logger.WarnContext(ctx, "releasing quota counters failed", "err", err)
	}
	if q.cfg.Refused != nil {
		q.cfg.Refused(worst.Subject, worst.Metric)
	}
	return worst.Err(now)
}

// snapshot returns the cached quotas, reloaded when older than Refresh or
// when the counters report another version (want != 0).
func (q *Quotas) snapshot(ctx context.Context, now time.Time, want int64) (*snapshot, error) {
	q.mu.Lock()
	snap := q.snap
	q.mu.Unlock()
	if snap != nil && (want == 0 || snap.version == want) && now.Sub(snap.loaded) < q.cfg.Refresh && !now.Before(snap.loaded) {
		return snap, nil
	}
	quotas, err := q.store.Quotas(ctx)
	if err != nil {
		return nil, err
	}
	next := &snapshot{version: want, loaded: now, quotas: map[subjectRef]service.Quota{}}
	if want == 0 && snap != nil {
		next.version = snap.version
	}
	var groupIDs []service.ID
	for _, qu := range quotas {
		next.quotas[subjectRef{qu.Subject, qu.SubjectID}] = qu
		if qu.Subject == service.QuotaGroup {
			groupIDs = append(groupIDs, qu.SubjectID)
		}
	}
	if len(groupIDs) > 0 {
		if next.groups, err = q.store.GroupsOfUsers(ctx, groupIDs); err != nil {
			return nil, err
		}
	}
	q.mu.Lock()
	q.snap = next
	q.mu.Unlock()
	return next, nil
}

// subjects lists the quota subjects a scope's usage counts against.
func (s *snapshot) subjects(scope service.UsageScope) []subjectRef {
	var out []subjectRef
	add := func(r subjectRef) {
		if _, ok := s.quotas[r]; ok && r.id != 0 {
			out = append(out, r)
		}
	}
	add(subjectRef{service.QuotaUser, scope.UserID})
	add(subjectRef{service.QuotaKey, scope.KeyID})
	for _, g := range s.groups[scope.UserID] {
		add(subjectRef{service.QuotaGroup, g})
	}
	return out
}

// keys lists the counters of the scope's quotas that limit something.
func (s *snapshot) keys(scope service.UsageScope, now time.Time) []service.QuotaCounter {
	var keys []service.QuotaCounter
	for _, r := range s.subjects(scope) {
		qu := s.quotas[r]
		if qu.DailyTokens > 0 || qu.DailyRequests > 0 {
			keys = append(keys, counterKey(r, service.QuotaDaily, now))
		}
		if qu.MonthlyTokens > 0 || qu.MonthlyRequests > 0 {
			keys = append(keys, counterKey(r, service.QuotaMonthly, now))
		}
	}
	return keys
}

func counterKey(r subjectRef, p service.QuotaPeriod, now time.Time) service.QuotaCounter {
	ttl := 48 * time.Hour
	if p == service.QuotaMonthly {
		ttl = 32 * 24 * time.Hour
	}
	return service.QuotaCounter{Subject: r.kind, ID: r.id, Period: p, Label: p.Label(now), TTL: ttl}
}

// exceeded says whether count passes a limit of k's quota. Requests count
// the one being admitted; tokens are what was spent before it.
func (s *snapshot) exceeded(k service.QuotaCounter, c service.QuotaCount, now time.Time) *service.QuotaExceeded {
	qu := s.quotas[subjectRef{k.Subject, k.ID}]
	tokens, requests := qu.DailyTokens, qu.DailyRequests
	if k.Period == service.QuotaMonthly {
		tokens, requests = qu.MonthlyTokens, qu.MonthlyRequests
	}
	ex := service.QuotaExceeded{Subject: k.Subject, SubjectID: k.ID, Period: k.Period, ResetsAt: k.Period.End(now)}
	switch {
	case tokens > 0 && c.Tokens >= tokens:
		ex.Metric, ex.Limit, ex.Used = "tokens", tokens, c.Tokens
	case requests > 0 && c.Requests > requests:
		ex.Metric, ex.Limit, ex.Used = "requests", requests, c.Requests-1
	default:
		return nil
	}
	return &ex
}

// mirror adds stored tokens to the counters of the quotas they count
// against. Best effort: a counter that misses them is behind until it
// expires, and a lost Redis is seeded again from the store.
func (q *Quotas) mirror(ctx context.Context, recs []service.UsageRecord) {
	if !q.cfg.Enabled {
		return
	}
	// Loaded here too: an instance that admits nothing (a worker) still
	// writes usage (ingestion's embeddings).
	snap, err := q.snapshot(ctx, q.cfg.Now(), 0)
	if err != nil {
		q.cfg.Logger.WarnContext(ctx, "quotas unavailable; usage not mirrored into the counters", "err", err)
		return
	}
	if len(snap.quotas) == 0 {
		return
	}
	adds := map[service.QuotaCounter]int64{}
	for _, r := range recs {
		if r.Tokens() == 0 {
			continue
		}
		scope := service.UsageScope{UserID: r.UserID, KeyID: r.KeyID}
		for _, s := range snap.subjects(scope) {
			for _, p := range []service.QuotaPeriod{service.QuotaDaily, service.QuotaMonthly} {
				adds[counterKey(s, p, r.At)] += r.Tokens()
			}
		}
	}
	if len(adds) == 0 {
		return
	}
	if err := q.counters.AddTokens(ctx, adds); err != nil {
		q.cfg.Logger.WarnContext(ctx, "mirroring usage into the quota counters failed", "err", err)
	}
}

// List returns every quota (admins).
func (q *Quotas) List(ctx context.Context, p service.Principal) ([]service.Quota, error) {
	if !p.OverridesOwnership() {
		return nil, service.Errorf(service.ErrForbidden, "only admins manage quotas")
	}
	return q.store.Quotas(ctx)
}

// Put sets a subject's quota; one with no limit left is deleted.
func (q *Quotas) Put(ctx context.Context, p service.Principal, in service.Quota) (*service.Quota, error) {
	ev := service.AuditEvent{Action: service.AuditQuotaPut, TargetType: service.TargetQuota,
		TargetID: fmt.Sprintf("%s:%s", in.Subject, in.SubjectID)}
	out, err := service.AuditDo(ctx, q.audit, ev, func(ctx context.Context, ev *service.AuditEvent) (*service.Quota, error) {
		if !p.OverridesOwnership() {
			return nil, service.Errorf(service.ErrForbidden, "only admins manage quotas")
		}
		if err := in.Validate(); err != nil {
			return nil, err
		}
		if err := q.store.QuotaSubjectExists(ctx, in.Subject, in.SubjectID); err != nil {
			return nil, err
		}
		ev.Detail = fmt.Sprintf("dailyTokens=%d monthlyTokens=%d dailyRequests=%d monthlyRequests=%d",
			in.DailyTokens, in.MonthlyTokens, in.DailyRequests, in.MonthlyRequests)
		if in.Empty() {
			err := q.store.DeleteQuota(ctx, in.Subject, in.SubjectID)
			if err != nil && !errors.Is(err, service.ErrNotFound) {
				return nil, err
			}
		} else if err := q.store.PutQuota(ctx, &in); err != nil {
			return nil, err
		}
		return &in, nil
	})
	if err == nil {
		q.changed(ctx)
	}
	return out, err
}

// Delete removes a subject's quota.
func (q *Quotas) Delete(ctx context.Context, p service.Principal, subject service.QuotaSubject, id service.ID) error {
	ev := service.AuditEvent{Action: service.AuditQuotaDelete, TargetType: service.TargetQuota,
		TargetID: fmt.Sprintf("%s:%s", subject, id)}
	err := q.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		if !p.OverridesOwnership() {
			return service.Errorf(service.ErrForbidden, "only admins manage quotas")
		}
		if !subject.Valid() {
			return service.Errorf(service.ErrInvalid, "subject must be user, group or key")
		}
		return q.store.DeleteQuota(ctx, subject, id)
	})
	if err == nil {
		q.changed(ctx)
	}
	return err
}

// changed tells every instance to reload (this one at once), after the
// change committed.
func (q *Quotas) changed(ctx context.Context) {
	q.mu.Lock()
	q.snap = nil
	q.mu.Unlock()
	if err := q.counters.BumpVersion(ctx); err != nil {
		q.cfg.Logger.WarnContext(ctx, "announcing a quota change failed; other instances see it within the refresh", "err", err)
	}
}

// MaxUsageDays bounds a report's range.
const MaxUsageDays = 400

// UsageInput asks for a usage report: dates as YYYY-MM-DD (UTC); the
// default is the current month.
type UsageInput struct {
	From    string
	To      string
	UserID  service.ID // admins: one user; 0 with All: everyone
	All     bool
	GroupBy []string
	Limit   int
}

// Report answers a usage report: a user's own usage, or (admins) anyone's.
func (q *Quotas) Report(ctx context.Context, p service.Principal, in UsageInput) ([]service.UsageRow, error) {
	now := q.cfg.Now().UTC()
	query := service.UsageQuery{From: service.QuotaMonthly.Start(now), To: service.QuotaDaily.Start(now), UserID: p.UserID, Limit: in.Limit}
	var err error
	if in.From != "" {
		if query.From, err = time.Parse(time.DateOnly, in.From); err != nil {
			return nil, service.Errorf(service.ErrInvalid, "from must be a date YYYY-MM-DD")
		}
	}
	if in.To != "" {
		if query.To, err = time.Parse(time.DateOnly, in.To); err != nil {
			return nil, service.Errorf(service.ErrInvalid, "to must be a date YYYY-MM-DD")
		}
	}
	switch {
	case query.To.Before(query.From):
		return nil, service.Errorf(service.ErrInvalid, "to must not be before from")
	case query.To.Sub(query.From) > MaxUsageDays*24*time.Hour:
		return nil, service.Errorf(service.ErrInvalid, "a report spans at most %d days", MaxUsageDays)
	}
	if in.All || in.UserID != 0 && in.UserID != p.UserID {
		if !p.OverridesOwnership() {
			return nil, service.Errorf(service.ErrForbidden, "only admins read others' usage")
		}
		query.UserID = in.UserID
	}
	for _, g := range in.GroupBy {
		by := service.UsageGroupBy(g)
		if !by.Valid() {
			return nil, service.Errorf(service.ErrInvalid, "groupBy must be among user, group, key, model, day, kind, knowledgeBase")
		}
		if !slices.Contains(query.GroupBy, by) {
			query.GroupBy = append(query.GroupBy, by)
		}
	}
	switch {
	case query.Limit < 0 || query.Limit > 1000:
		return nil, service.Errorf(service.ErrInvalid, "limit must be between 1 and 1000")
	case query.Limit == 0:
		query.Limit = 1000
	}
	return q.store.UsageReport(ctx, query)
}
