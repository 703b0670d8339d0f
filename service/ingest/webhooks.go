package ingest

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// Webhook headers. The signature is hex HMAC-SHA256, keyed by the
// webhook's secret, over "<timestamp>.<body>"; a receiver recomputes it and
// refuses timestamps too far from its clock (replays).
const (
	headerTimestamp = "X-Ragent-Timestamp"
	headerSignature = "X-Ragent-Signature"
	headerEvent     = "X-Ragent-Event"
	headerDelivery  = "X-Ragent-Delivery"
)

// WebhookStore keeps webhooks and their outbox of deliveries.
type WebhookStore interface {
	CreateWebhook(ctx context.Context, w *service.Webhook, secretEnc []byte, createdBy service.ID) error
	Webhooks(ctx context.Context, kbID service.ID) ([]*service.Webhook, error)
	DeleteWebhook(ctx context.Context, kbID, id service.ID) error
	ClaimDeliveries(ctx context.Context, lease time.Duration, limit int) ([]service.WebhookDelivery, error)
	FinishDelivery(ctx context.Context, id int64, errMsg string, retryIn time.Duration) error
	SkipDelivery(ctx context.Context, id int64, why string) error
	PruneDeliveries(ctx context.Context, sentBefore, doneBefore time.Time, limit int) (int, error)
	// UserByID returns a live user (service.ErrNotFound for a deleted
	// one): a webhook's creator, whose access its deliveries run under.
	UserByID(ctx context.Context, id service.ID) (*service.User, error)
}

// sign returns the signature header value of body sent at ts.
func sign(secret string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(ts, 10)))
	m.Write([]byte("."))
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// sealer encrypts webhook secrets at rest with AES-256-GCM. They cannot be
// hashed like API keys: ragent needs the secret itself to sign with.
type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) sealer {
	k := sha256.Sum256(append([]byte("ragent webhook secrets v1\x00"), key...))
	block, err := aes.NewCipher(k[:])
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return sealer{aead}
}

func (s sealer) seal(plain string, webhookID service.ID) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	// The webhook id is authenticated data: a sealed secret copied to
	// another row does not open there.
	return s.aead.Seal(nonce, nonce, []byte(plain), []byte(webhookID.String())), nil
}

func (s sealer) open(sealed []byte, webhookID service.ID) (string, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return "", errors.New("sealed secret too short")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(webhookID.String()))
	return string(plain), err
}

// CreateWebhook adds a webhook to a knowledge base (managers). Its URL is
// held to the same rules as URL imports; the answer carries the secret,
// which is never shown again.
func (s *Service) CreateWebhook(ctx context.Context, p service.Principal, kbID service.ID, rawURL string) (*service.Webhook, error) {
	var w *service.Webhook
	ev := service.AuditEvent{Action: service.AuditWebhookCreate, TargetType: service.TargetWebhook,
		Detail: fmt.Sprintf("kb=%s url=%q", kbID, text.Truncate(rawURL, 200))}
	err := s.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		if s.hooks == nil {
			return service.Errorf(service.ErrUnavailable, "webhooks are not enabled")
		}
		if len(rawURL) > MaxURLBytes {
			return service.Errorf(service.ErrInvalid, "url is longer than %d bytes", MaxURLBytes)
		}
		u, err := s.cfg.Net.CheckURL(rawURL)
		if err != nil {
			return err
		}
		if _, err := s.access.Require(ctx, p, kbID, service.KBManager); err != nil {
			return err
		}
		id, err := s.ids.NextID()
		if err != nil {
			return err
		}
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return err
		}
		w = &service.Webhook{ID: id, KnowledgeBaseID: kbID, URL: u.String(), Secret: "whsec_" + hex.EncodeToString(raw[:]),
			CreatedBy: p.UserID, CreatedByName: p.Username}
		sealed, err := s.sealer.seal(w.Secret, id)
		if err != nil {
			return err
		}
		ev.TargetID = id.String()
		return s.hooks.CreateWebhook(ctx, w, sealed, p.UserID)
	})
	return w, err
}

// Webhooks lists a knowledge base's webhooks, without secrets (managers).
func (s *Service) Webhooks(ctx context.Context, p service.Principal, kbID service.ID) ([]*service.Webhook, error) {
	if s.hooks == nil {
		return nil, service.Errorf(service.ErrUnavailable, "webhooks are not enabled")
	}
	if _, err := s.access.Require(ctx, p, kbID, service.KBManager); err != nil {
		return nil, err
	}
	return s.hooks.Webhooks(ctx, kbID)
}

// DeleteWebhook removes a webhook (managers); its undelivered events fail.
func (s *Service) DeleteWebhook(ctx context.Context, p service.Principal, kbID, id service.ID) error {
	ev := service.AuditEvent{Action: service.AuditWebhookDelete, TargetType: service.TargetWebhook, TargetID: id.String(),
		Detail: "kb=" + kbID.String()}
	return s.audit.Do(ctx, ev, func(ctx context.Context, _ *service.AuditEvent) error {
		if s.hooks == nil {
			return service.Errorf(service.ErrUnavailable, "webhooks are not enabled")
		}
		if _, err := s.access.Require(ctx, p, kbID, service.KBManager); err != nil {
			return err
		}
		if err := s.hooks.DeleteWebhook(ctx, kbID, id); err != nil {
			if errors.Is(err, service.ErrNotFound) {
				return service.Errorf(service.ErrNotFound, "webhook %s not found", id)
			}
			return err
		}
		return nil
	})
}

// RunWebhooks delivers due webhook events until ctx ends, polling every
// WebhookBackoff (at most a second): up to WebhookConcurrency webhooks at
// once, one event at a time per webhook (the claim keeps a second one of a
// webhook back while one is in flight on any instance), so a slow receiver
// delays only its own events. Every instance may run it.
func (s *Service) RunWebhooks(ctx context.Context) error {
	return s.runPool(ctx, min(time.Second, s.cfg.WebhookBackoff), nil, s.cfg.WebhookConcurrency, "webhook delivery failed", s.claimDeliveries)
}

// claimDeliveries claims up to n due deliveries and returns their sends.
func (s *Service) claimDeliveries(ctx context.Context, n int) ([]func(context.Context), error) {
	due, err := s.hooks.ClaimDeliveries(ctx, s.cfg.FetchTimeout+time.Minute, n)
	if err != nil {
		return nil, err
	}
	return poolJobs(due, s.deliverOne), nil
}

// deliverOne attempts a claimed delivery and records the outcome: sent,
// retried later, dead-lettered, or skipped when the webhook's creator can
// no longer read its knowledge base (a webhook acts for its creator, and
// must not outlive their access).
func (s *Service) deliverOne(ctx context.Context, d service.WebhookDelivery) {
	record := context.WithoutCancel(ctx)
	ok, err := s.creatorMayRead(ctx, d)
	if err != nil {
		// The database: the lease runs out and the next claim tries again.
		s.log.WarnContext(ctx, "checking a webhook creator's access failed", "delivery", d.ID, "webhook", d.WebhookID, "err", err)
		return
	}
	if !ok {
		why := failure{codeCreatorNoAccess, "not sent: the webhook's creator can no longer read the knowledge base"}
		s.log.WarnContext(ctx, "webhook delivery skipped", "delivery", d.ID, "webhook", d.WebhookID, "creator", d.CreatedBy)
		if err := s.hooks.SkipDelivery(record, d.ID, why.String()); err != nil {
			s.log.WarnContext(ctx, "recording a skipped delivery failed", "delivery", d.ID, "err", err)
		}
		return
	}
	errMsg, cause := s.deliver(ctx, d)
	var retryIn time.Duration
	if errMsg != "" && d.Attempts+1 < s.cfg.WebhookMaxAttempts {
		// Exponential: backoff, 2×, 4×, … capped at an hour.
		retryIn = min(s.cfg.WebhookBackoff<<min(d.Attempts, 20), time.Hour)
	}
	if errMsg != "" {
		s.log.WarnContext(ctx, "webhook not delivered", "delivery", d.ID, "webhook", d.WebhookID,
			"attempt", d.Attempts+1, "retry_in", retryIn, "err", errMsg, "detail", cause)
	}
	if err := s.hooks.FinishDelivery(record, d.ID, errMsg, retryIn); err != nil {
		s.log.WarnContext(ctx, "recording a delivery failed", "delivery", d.ID, "err", err)
	}
}

// creatorMayRead reports whether the webhook's creator is a live, enabled
// user who may still read the knowledge base, by the same rule as every
// request (service.Access).
func (s *Service) creatorMayRead(ctx context.Context, d service.WebhookDelivery) (bool, error) {
	if d.CreatedBy == 0 {
		return false, nil
	}
	u, err := s.hooks.UserByID(ctx, d.CreatedBy)
	if errors.Is(err, service.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if u.Disabled {
		return false, nil
	}
	_, err = s.access.Role(ctx, service.Principal{UserID: u.ID, Username: u.Username, Role: u.Role}, d.KnowledgeBaseID)
	if errors.Is(err, service.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// deliver POSTs one event and returns why it failed ("" on a 2xx) as a
// failure's stable text, and the cause apart for the log.
func (s *Service) deliver(ctx context.Context, d service.WebhookDelivery) (string, error) {
	secret, err := s.sealer.open(d.SecretEnc, d.WebhookID)
	if err != nil {
		return failure{codeSecret, "the webhook's secret cannot be opened (was the auth secret changed?)"}.String(), err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Payload))
	if err != nil {
		return failure{codeFetchFailed, "the webhook's URL cannot be requested"}.String(), err
	}
	ts := s.now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ragent-webhooks")
	req.Header.Set(headerTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(headerSignature, sign(secret, ts, d.Payload))
	req.Header.Set(headerEvent, d.Event)
	req.Header.Set(headerDelivery, strconv.FormatInt(d.ID, 10))
	resp, err := s.hookClient.Do(req)
	if err != nil {
		return requestFailure(err, s.cfg.FetchTimeout, "the receiver").String(), err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusFailure("the receiver", resp).String(), nil
	}
	return "", nil
}
