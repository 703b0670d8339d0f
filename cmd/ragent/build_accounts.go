package main

import (
	"context"
	"fmt"

	"github.com/ragent-go/ragent/cache"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/auth"
	"github.com/ragent-go/ragent/service/usage"
)

// buildAccounts: the first admin and the signing secret (under the startup
// lock), usage records and quotas.
func (a *App) buildAccounts(ctx context.Context, w *parts) error {
	cfg, log := a.cfg, a.log
	err := a.store.WithStartupLock(ctx, func(ctx context.Context) error {
		secret, err := a.signingSecret(ctx)
		if err != nil {
			return err
		}
		w.signing = secret
		w.authSvc, err = auth.New(a.store, loginAttempts{cache.NewAuthState(a.rdb, cfg.RedisPrefix)}, w.ids, w.audit, authConfig(cfg, secret, log))
		if err != nil {
			return err
		}
		generated, created, err := w.authSvc.Bootstrap(ctx, cfg.AdminUsername, cfg.AdminPassword)
		if err != nil {
			return err
		}
		if created {
			a.AdminPassword = generated
			log.Info("created the first admin", "username", cfg.AdminUsername, "password_generated", generated != "")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate and bootstrap: %w", err)
	}
	a.runners = append(a.runners, w.authSvc.Run) // forgets revocations of expired tokens
	if w.sso, err = newSSO(cfg, w.authSvc, a.store); err != nil {
		return fmt.Errorf("single sign-on: %w", err)
	}
	if w.sso != nil {
		a.runners = append(a.runners, w.sso.Run) // forgets expired logins in flight and provider sessions
	}

	// Usage: every model call's tokens, buffered and written in batches
	// (and on shutdown: the closer runs before Postgres closes); quotas
	// checked against counters in Redis (docs/usage-and-quotas.md "Usage and quotas").
	usageMetrics := newUsageMetrics(a.registry)
	meter := usage.NewMeter(a.store, newCallID, usage.MeterConfig{
		FlushInterval: cfg.UsageFlushInterval, Logger: log,
		Dropped: func(n int) { usageMetrics.dropped.Add(float64(n)) }, Recorded: usageMetrics.recorded,
	})
	quotas := usage.NewQuotas(a.store, cache.NewQuotaCounters(a.rdb, cfg.RedisPrefix), meter, w.audit, usage.QuotasConfig{
		Enabled: cfg.QuotasEnabled, Logger: log,
		Refused: func(s service.QuotaSubject, metric string) {
			usageMetrics.refusals.WithLabelValues(string(s), metric).Inc()
		},
	})
	a.meter, a.quotas = meter, quotas
	a.runners = append(a.runners, func(ctx context.Context) error { meter.Run(ctx); return nil })
	retention := usage.Retention{Store: a.store, Age: cfg.UsageCallRetention, Logger: log}
	a.runners = append(a.runners, func(ctx context.Context) error { retention.Run(ctx); return nil })
	a.closers = append(a.closers, func(ctx context.Context) error { return meter.Close(ctx) })
	return nil
}
