package service

import (
	"errors"
	"testing"
	"time"
)

func TestQuotaPeriods(t *testing.T) {
	at := time.Date(2026, 12, 31, 23, 59, 59, 0, time.FixedZone("UTC+8", 8*3600)) // 15:59:59 UTC
	for _, c := range []struct {
		p          QuotaPeriod
		start, end string
		label      string
	}{
		{QuotaDaily, "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z", "20261231"},
		{QuotaMonthly, "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", "202612"},
	} {
		if got := c.p.Start(at).Format(time.RFC3339); got != c.start {
			t.Errorf("%s start %s, want %s", c.p, got, c.start)
		}
		if got := c.p.End(at).Format(time.RFC3339); got != c.end {
			t.Errorf("%s end %s, want %s", c.p, got, c.end)
		}
		if got := c.p.Label(at); got != c.label {
			t.Errorf("%s label %s, want %s", c.p, got, c.label)
		}
	}
}

func TestQuotaValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		q    Quota
		ok   bool
	}{
		{"user", Quota{Subject: QuotaUser, SubjectID: 1, DailyTokens: 10}, true},
		{"all zero (a removal)", Quota{Subject: QuotaKey, SubjectID: 1}, true},
		{"unknown subject", Quota{Subject: "team", SubjectID: 1}, false},
		{"no id", Quota{Subject: QuotaGroup}, false},
		{"negative", Quota{Subject: QuotaUser, SubjectID: 1, MonthlyRequests: -1}, false},
		{"too large", Quota{Subject: QuotaUser, SubjectID: 1, MonthlyTokens: MaxQuota + 1}, false},
	} {
		err := c.q.Validate()
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestQuotaExceededErr(t *testing.T) {
	now := time.Date(2026, 12, 2, 23, 0, 0, 0, time.UTC)
	ex := QuotaExceeded{Subject: QuotaGroup, SubjectID: 7, Period: QuotaDaily, Metric: "tokens", Limit: 100, Used: 120,
		ResetsAt: QuotaDaily.End(now)}
	err := ex.Err(now)
	var de *Error
	if !errors.As(err, &de) || CodeOf(err) != "quota_exceeded" || de.RetryAfter != time.Hour {
		t.Fatalf("%v (%+v)", err, de)
	}
	if de.Details["subject"] != "group" || de.Details["subjectId"] != "7" || de.Details["resetsAt"] != "2026-12-03T00:00:00Z" || de.Details["limit"] != "100" {
		t.Fatalf("details %v", de.Details)
	}
}
