package mq

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what passes through the queue, for every driver alike:
// publications by outcome, deliveries (first and repeated) and dead letters
// by topic. A nil *Metrics counts nothing.
type Metrics struct {
	published    *prometheus.CounterVec // topic, outcome
	delivered    *prometheus.CounterVec // topic
	redelivered  *prometheus.CounterVec // topic
	deadLettered *prometheus.CounterVec // topic
}

// NewMetrics registers the queue metrics on reg, with the series of topics
// present from the start (a dashboard shows 0, not "no data").
func NewMetrics(reg prometheus.Registerer, topics ...string) *Metrics {
	vec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ragent", Subsystem: "mq", Name: name, Help: help}, labels)
	}
	m := &Metrics{
		published:    vec("published_total", "Messages published, by topic and outcome (ok, error).", "topic", "outcome"),
		delivered:    vec("delivered_total", "First deliveries of messages to a handler, by topic.", "topic"),
		redelivered:  vec("redelivered_total", "Repeated deliveries (after a failure, a crash or a takeover), by topic.", "topic"),
		deadLettered: vec("dead_lettered_total", "Messages moved to the dead-letter destination, by topic.", "topic"),
	}
	reg.MustRegister(m.published, m.delivered, m.redelivered, m.deadLettered)
	for _, t := range topics {
		m.published.WithLabelValues(t, "ok")
		m.published.WithLabelValues(t, "error")
		m.delivered.WithLabelValues(t)
		m.redelivered.WithLabelValues(t)
		m.deadLettered.WithLabelValues(t)
	}
	return m
}

// Delivered records one delivery of m and the outcome Deliver decided;
// drivers call it after Deliver.
func (m *Metrics) Delivered(msg Message, o Outcome) {
	if m == nil {
		return
	}
	if msg.Deliveries > 1 {
		m.redelivered.WithLabelValues(msg.Topic).Inc()
	} else {
		m.delivered.WithLabelValues(msg.Topic).Inc()
	}
	if o == DeadLetter {
		m.deadLettered.WithLabelValues(msg.Topic).Inc()
	}
}

// Tracker is a Producer whose queue may lose a publication it
// acknowledged (Redis Streams after a failover) and can tell: see
// redisstream.Producer.PublishTracked and Holds.
type Tracker interface {
	PublishTracked(ctx context.Context, topic, key string, body []byte) (ref string, err error)
	Holds(ctx context.Context, topic, ref string) (bool, error)
}

// Producer returns p counting its publications; a Tracker stays one.
func (m *Metrics) Producer(p Producer) Producer {
	if m == nil {
		return p
	}
	if t, ok := p.(Tracker); ok {
		return measuredTracker{measuredProducer{p: p, m: m}, t}
	}
	return measuredProducer{p: p, m: m}
}

type measuredTracker struct {
	measuredProducer
	t Tracker
}

func (p measuredTracker) PublishTracked(ctx context.Context, topic, key string, body []byte) (string, error) {
	ref, err := p.t.PublishTracked(ctx, topic, key, body)
	p.count(topic, err)
	return ref, err
}

func (p measuredTracker) Holds(ctx context.Context, topic, ref string) (bool, error) {
	return p.t.Holds(ctx, topic, ref)
}

type measuredProducer struct {
	p Producer
	m *Metrics
}

func (p measuredProducer) Publish(ctx context.Context, topic, key string, body []byte) error {
	err := p.p.Publish(ctx, topic, key, body)
	p.count(topic, err)
	return err
}

func (p measuredProducer) count(topic string, err error) {
	outcome := "ok"
	if err != nil && !errors.Is(err, context.Canceled) {
		outcome = "error"
	}
	if err == nil || outcome == "error" {
		p.m.published.WithLabelValues(topic, outcome).Inc()
	}
}

// Backlog is a consumer group's position in its topic, for drivers that can
// tell: Lag counts messages not yet delivered to the group, Pending those
// delivered and not yet acknowledged.
type Backlog struct {
	Lag, Pending int64
}
