// Package mq is the message-queue seam of ragent: the Producer and Consumer
// interfaces that the outbox relay and the ingestion worker are written
// against, and the delivery contract every driver keeps.
//
// Two drivers implement it: mq/redisstream (Redis Streams consumer groups, the
// default for a single machine) and mq/rocketmq (Apache RocketMQ, production).
// cmd/ragent picks one with RAGENT_MQ_DRIVER and builds both halves from the
// same driver package (NewProducer, NewConsumer).
//
// The contract, identical for both drivers (Deliver decides it, so a driver
// only maps the Outcome to its queue; package mqtest checks every driver
// against it):
//
//   - Delivery is at least once. The same message may reach a handler more
//     than once (a redelivery after a crash or a failure, or the same key
//     published twice); deduplication is the consume guard's job (package
//     idempotent), not the driver's.
//   - A handler returning nil acknowledges the message.
//   - A handler returning any other error leaves the message unacknowledged:
//     it is redelivered later, with Message.Deliveries one higher. ErrRetryLater
//     names that outcome for handlers that expect it (another instance holds
//     the consume guard) so drivers log it quietly.
//   - After a driver-specific maximum number of deliveries a message that keeps
//     failing is moved to a dead-letter destination and acknowledged.
//   - A handler returning an error that wraps ErrPermanent (see Permanent) is
//     acknowledged and dead-lettered at once: retrying cannot help.
//   - Consumer.Run blocks until its context ends. On shutdown in-flight
//     handlers see their context cancelled; work they do not finish is never
//     acknowledged, so another instance receives it again.
package mq

import (
	"context"
	"errors"
)

// Message is one delivery of a published message.
type Message struct {
	Topic string
	Key   string // the business key given to Publish (e.g. "documentId:generation")
	Body  []byte
	// ID is the driver's identifier of the stored message (a stream entry ID,
	// a RocketMQ MsgId). It is stable across redeliveries of the same
	// publication but differs between two publications of the same Key.
	ID string
	// Deliveries counts the deliveries of this publication, this one
	// included: 1 on the first delivery.
	Deliveries int
}

// Producer publishes messages to a topic.
type Producer interface {
	// Publish stores the message durably in the queue or returns an error;
	// it gives up when ctx ends.
	Publish(ctx context.Context, topic, key string, body []byte) error
}

// Handler processes one message. Its error decides the message's fate (see the
// package documentation).
type Handler func(ctx context.Context, m Message) error

// Consumer delivers the messages of one topic to one Handler on behalf of a
// consumer group: every group sees every message, and within a group each
// message goes to one member at a time.
type Consumer interface {
	// Run consumes until ctx ends, then returns nil after in-flight handlers
	// have returned; it returns an error only when it cannot start.
	Run(ctx context.Context) error
}

// Pinger reports whether the queue is reachable; /readyz uses it.
type Pinger interface {
	Ping(ctx context.Context) error
}

var (
	// ErrPermanent marks a failure that no retry can cure (an unsupported or
	// corrupt document): the message is acknowledged and dead-lettered at once.
	ErrPermanent = errors.New("mq: permanent failure")

	// ErrRetryLater marks an expected, transient refusal, e.g. the same key is
	// being consumed by another instance right now. The message is not
	// acknowledged and is redelivered later, exactly as for any other error;
	// drivers only log it at a lower level.
	ErrRetryLater = errors.New("mq: retry later")
)

// Permanent wraps err so that errors.Is(err, ErrPermanent) holds while the
// original error stays reachable through errors.Is/As and in the message.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{ErrPermanent, e.err} }
