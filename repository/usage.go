package repository

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ragent-go/ragent/service"
)

// SaveUsage records usage: each call once by its id (migration 0018), and
// the day's sums of the calls it recorded now, in one statement. It
// returns the records it recorded now.
func (s *Store) SaveUsage(ctx context.Context, recs []service.UsageRecord) ([]service.UsageRecord, error) {
	byID := make(map[string]service.UsageRecord, len(recs))
	var (
		ids, ats, models, kinds, estimated    textArray
		users, keys, kbs, prompt, compl, reqs intArray
	)
	for _, r := range recs {
		if _, dup := byID[r.CallID]; dup {
			continue
		}
		byID[r.CallID] = r
		ids = append(ids, r.CallID)
		ats = append(ats, r.At.UTC().Format(time.RFC3339Nano))
		users, keys, kbs = append(users, int64(r.UserID)), append(keys, int64(r.KeyID)), append(kbs, int64(r.KnowledgeBaseID))
		models, kinds = append(models, r.Model), append(kinds, string(r.Kind))
		prompt, compl, reqs = append(prompt, int64(r.PromptTokens)), append(compl, int64(r.CompletionTokens)), append(reqs, int64(r.Requests))
		estimated = append(estimated, strconv.FormatBool(r.Estimated))
	}
	var inserted []string
	err := s.conn(ctx).Raw(`WITH input AS (
			SELECT * FROM unnest(?::text[], ?::timestamptz[], ?::bigint[], ?::bigint[], ?::bigint[], ?::text[], ?::text[],
				?::bigint[], ?::bigint[], ?::bigint[], ?::boolean[])
				AS t(call_id, at, user_id, key_id, kb_id, model, kind, prompt_tokens, completion_tokens, requests, estimated)
		), ins AS (
			INSERT INTO usage_calls SELECT * FROM input ON CONFLICT (call_id) DO NOTHING RETURNING *
		), sums AS (
			INSERT INTO usage_daily AS d (day, user_id, key_id, kb_id, model, kind, calls, requests, prompt_tokens, completion_tokens, estimated_tokens)
			SELECT (at AT TIME ZONE 'UTC')::date, user_id, key_id, kb_id, model, kind,
				count(*) FILTER (WHERE kind <> 'request'), sum(requests), sum(prompt_tokens), sum(completion_tokens),
				coalesce(sum(prompt_tokens + completion_tokens) FILTER (WHERE estimated), 0)
			FROM ins GROUP BY 1, 2, 3, 4, 5, 6
			ON CONFLICT (day, user_id, key_id, kb_id, model, kind) DO UPDATE SET
				calls = d.calls + EXCLUDED.calls, requests = d.requests + EXCLUDED.requests,
				prompt_tokens = d.prompt_tokens + EXCLUDED.prompt_tokens,
				completion_tokens = d.completion_tokens + EXCLUDED.completion_tokens,
				estimated_tokens = d.estimated_tokens + EXCLUDED.estimated_tokens
		)
		SELECT call_id FROM ins`, ids, ats, users, keys, kbs, models, kinds, prompt, compl, reqs, estimated).
		Scan(&inserted).Error
	if err != nil {
		return nil, translate(err)
	}
	out := make([]service.UsageRecord, 0, len(inserted))
	for _, id := range inserted {
		out = append(out, byID[id])
	}
	return out, nil
}

type quotaRow struct {
	Subject         string
	SubjectID       int64
	DailyTokens     int64
	MonthlyTokens   int64
	DailyRequests   int64
	MonthlyRequests int64
	UpdatedAt       time.Time
}

func (quotaRow) TableName() string { return "quotas" }

// Quotas lists every quota.
func (s *Store) Quotas(ctx context.Context) ([]service.Quota, error) {
	var rows []quotaRow
	if err := s.conn(ctx).Order("subject, subject_id").Find(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := make([]service.Quota, len(rows))
	for i, r := range rows {
		out[i] = service.Quota{Subject: service.QuotaSubject(r.Subject), SubjectID: service.ID(r.SubjectID),
			DailyTokens: r.DailyTokens, MonthlyTokens: r.MonthlyTokens, DailyRequests: r.DailyRequests,
			MonthlyRequests: r.MonthlyRequests, UpdatedAt: r.UpdatedAt}
	}
	return out, nil
}

// PutQuota creates or replaces a subject's quota.
func (s *Store) PutQuota(ctx context.Context, q *service.Quota) error {
	return translate(s.conn(ctx).Raw(`INSERT INTO quotas (subject, subject_id, daily_tokens, monthly_tokens, daily_requests, monthly_requests)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (subject, subject_id) DO UPDATE SET daily_tokens = EXCLUDED.daily_tokens,
			monthly_tokens = EXCLUDED.monthly_tokens, daily_requests = EXCLUDED.daily_requests,
			monthly_requests = EXCLUDED.monthly_requests, updated_at = now()
		RETURNING updated_at`, string(q.Subject), int64(q.SubjectID), q.DailyTokens, q.MonthlyTokens,
		q.DailyRequests, q.MonthlyRequests).Scan(&q.UpdatedAt).Error)
}

// DeleteQuota removes a subject's quota; service.ErrNotFound when it has none.
func (s *Store) DeleteQuota(ctx context.Context, subject service.QuotaSubject, id service.ID) error {
	return found(s.conn(ctx).Exec(`DELETE FROM quotas WHERE subject = ? AND subject_id = ?`, string(subject), int64(id)))
}

// QuotaSubjectExists checks that a live user, group or API key has id.
func (s *Store) QuotaSubjectExists(ctx context.Context, subject service.QuotaSubject, id service.ID) error {
	query := map[service.QuotaSubject]string{
		service.QuotaUser:  `SELECT 1 FROM users WHERE id = ? AND deleted_at IS NULL`,
		service.QuotaGroup: `SELECT 1 FROM groups WHERE id = ?`,
		service.QuotaKey:   `SELECT 1 FROM api_keys WHERE id = ? AND revoked_at IS NULL`,
	}[subject]
	var one int
	if err := found(s.conn(ctx).Raw(query, int64(id)).Scan(&one)); err != nil {
		if err == service.ErrNotFound {
			return service.Errorf(service.ErrNotFound, "%s %s not found", subject, id)
		}
		return err
	}
	return nil
}

// GroupsOfUsers maps each member of the groups to its groups among them.
func (s *Store) GroupsOfUsers(ctx context.Context, groupIDs []service.ID) (map[service.ID][]service.ID, error) {
	var rows []struct{ UserID, GroupID int64 }
	if err := s.conn(ctx).Raw(`SELECT user_id, group_id FROM group_members WHERE group_id = ANY(?)`, idArray(groupIDs)).
		Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := map[service.ID][]service.ID{}
	for _, r := range rows {
		out[service.ID(r.UserID)] = append(out[service.ID(r.UserID)], service.ID(r.GroupID))
	}
	return out, nil
}

// UsageSum totals a subject's tokens and requests from the day of from on;
// a group's are its current members'.
func (s *Store) UsageSum(ctx context.Context, subject service.QuotaSubject, id service.ID, from time.Time) (tokens, requests int64, err error) {
	where := map[service.QuotaSubject]string{
		service.QuotaUser:  `user_id = ?`,
		service.QuotaKey:   `key_id = ?`,
		service.QuotaGroup: `user_id IN (SELECT user_id FROM group_members WHERE group_id = ?)`,
	}[subject]
	var row struct{ Tokens, Requests int64 }
	err = s.conn(ctx).Raw(`SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) AS tokens, coalesce(sum(requests), 0) AS requests
		FROM usage_daily WHERE day >= ?::date AND `+where, from.UTC().Format(time.DateOnly), int64(id)).Scan(&row).Error
	return row.Tokens, row.Requests, translate(err)
}

// usageDims are the columns of each dimension a report may group by.
var usageDims = map[service.UsageGroupBy]struct {
	cols []string
	join string
}{
	service.UsageByDay:   {cols: []string{`to_char(d.day, 'YYYY-MM-DD') AS day`}},
	service.UsageByUser:  {cols: []string{`d.user_id`, `coalesce(u.username, '') AS username`}, join: `LEFT JOIN users u ON u.id = d.user_id`},
	service.UsageByGroup: {cols: []string{`gm.group_id`, `g.name AS group_name`}, join: `JOIN group_members gm ON gm.user_id = d.user_id JOIN groups g ON g.id = gm.group_id`},
	service.UsageByKey:   {cols: []string{`d.key_id`, `coalesce(k.name, '') AS key_name`}, join: `LEFT JOIN api_keys k ON k.id = d.key_id`},
	service.UsageByModel: {cols: []string{`d.model`}},
	service.UsageByKind:  {cols: []string{`d.kind`}},
	service.UsageByKB:    {cols: []string{`d.kb_id AS knowledge_base_id`}},
}

// UsageReport sums usage over the days of q, grouped by q.GroupBy: by day
// in date order, else the largest first.
func (s *Store) UsageReport(ctx context.Context, q service.UsageQuery) ([]service.UsageRow, error) {
	var cols, groups, joins []string
	order := `sum(d.prompt_tokens + d.completion_tokens) DESC, sum(d.requests) DESC`
	for i, by := range q.GroupBy {
		dim := usageDims[by]
		if by == service.UsageByDay {
			order = groupOrdinal(q.GroupBy, i) + ", " + order
		}
		cols = append(cols, dim.cols...)
		if dim.join != "" {
			joins = append(joins, dim.join)
		}
		for range dim.cols {
			groups = append(groups, strconv.Itoa(len(groups)+1))
		}
	}
	cols = append(cols, `coalesce(sum(d.calls), 0) AS calls, coalesce(sum(d.requests), 0) AS requests, coalesce(sum(d.prompt_tokens), 0) AS prompt_tokens,
		coalesce(sum(d.completion_tokens), 0) AS completion_tokens, coalesce(sum(d.estimated_tokens), 0) AS estimated_tokens`)
	where, args := `d.day BETWEEN ?::date AND ?::date`, []any{q.From.Format(time.DateOnly), q.To.Format(time.DateOnly)}
	if q.UserID != 0 {
		where += ` AND d.user_id = ?`
		args = append(args, int64(q.UserID))
	}
	sql := fmt.Sprintf(`SELECT %s FROM usage_daily d %s WHERE %s`, strings.Join(cols, ", "), strings.Join(joins, " "), where)
	if len(groups) > 0 {
		sql += ` GROUP BY ` + strings.Join(groups, ", ")
	}
	sql += ` ORDER BY ` + order + ` LIMIT ?`
	args = append(args, q.Limit)
	var rows []struct {
		Day                                                              string
		UserID, GroupID, KeyID, KnowledgeBaseID                          int64
		Username, GroupName, KeyName, Model, Kind                        string
		Calls, Requests, PromptTokens, CompletionTokens, EstimatedTokens int64
	}
	if err := s.conn(ctx).Raw(sql, args...).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := make([]service.UsageRow, len(rows))
	for i, r := range rows {
		out[i] = service.UsageRow{Day: r.Day, UserID: service.ID(r.UserID), Username: r.Username,
			GroupID: service.ID(r.GroupID), GroupName: r.GroupName, KeyID: service.ID(r.KeyID), KeyName: r.KeyName,
			KnowledgeBaseID: service.ID(r.KnowledgeBaseID), Model: r.Model, Kind: service.UsageKind(r.Kind),
			Calls: r.Calls, Requests: r.Requests, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
			TotalTokens: r.PromptTokens + r.CompletionTokens, EstimatedTokens: r.EstimatedTokens}
	}
	return out, nil
}

// groupOrdinal is the select-list position of dimension i's first column.
func groupOrdinal(dims []service.UsageGroupBy, i int) string {
	pos := 1
	for _, by := range dims[:i] {
		pos += len(usageDims[by].cols)
	}
	return strconv.Itoa(pos)
}

// PruneUsageCalls deletes up to limit usage_calls rows made before t,
// oldest first (usage.Retention); usage_daily keeps their totals.
func (s *Store) PruneUsageCalls(ctx context.Context, before time.Time, limit int) (int64, error) {
	res := s.conn(ctx).Exec(`DELETE FROM usage_calls WHERE call_id IN (
		SELECT call_id FROM usage_calls WHERE at < ? ORDER BY at LIMIT ?)`, before, limit)
	return res.RowsAffected, translate(res.Error)
}
