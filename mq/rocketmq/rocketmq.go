// Package rocketmq is the Apache RocketMQ driver of package mq
// (RAGENT_MQ_DRIVER=rocketmq), built on github.com/apache/rocketmq-client-go/v2.
//
// Topics must exist before a consumer starts (the client fails with "route
// info not found" otherwise): cmd calls CreateTopic at startup with the topic
// and its consumer groups; it also creates the dead-letter topic
// DeadTopic(topic) and each group's retry topic.
//
// Retries use RocketMQ's own mechanism: a handler error makes the consumer
// return ConsumeRetryLater, the broker re-delivers the message through the
// group's %RETRY% topic after a delay (RetryDelayLevel) and counts the
// reconsumes, from which Message.Deliveries is derived. A consumer that stops
// mid-message does not report it at all; the group's committed offset still
// points at it, so the next consumer receives it again, counted as a first
// delivery (with, possibly, a few finished neighbours from the same queue).
// The client sends a message back by itself when a handler runs longer than
// 15 minutes (its consume timeout).
//
// Dead letters do not use RocketMQ's %DLQ%<group> topics: those are
// write-only by default, so nobody could read them without an admin tool.
// Instead, a permanent error, or a failure on the MaxDeliveries-th delivery,
// publishes the message to DeadTopic(topic), with the reason in the
// properties PropError, PropDeliveries, PropGroup and PropOriginID, and
// reports success. Only if that publish fails does the message go back for
// another retry, with RocketMQ's %DLQ% (after 16 reconsumes) as the last
// backstop.
//
// Process-wide state of the client library: it logs through one package-level
// logger, which SetClientLogger routes into slog (call it once, in cmd, before
// any client exists); and its WithRemotingTimeout options write into one
// shared struct, so this package never sets them and bounds Publish by its
// context instead. The library has had data races; with the latter avoided
// this package's tests pass under -race, but the Makefile runs them without it.
package rocketmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// Properties that a dead letter carries besides the original key and body.
const (
	PropOriginID   = "RAGENT_ORIGIN_ID"  // the message's ID in its topic
	PropGroup      = "RAGENT_GROUP"      // the consumer group that gave up
	PropDeliveries = "RAGENT_DELIVERIES" // deliveries before it gave up
	PropError      = "RAGENT_ERROR"      // the last error
)

// queueNums is the number of read and write queues of a created topic: a few
// per consumer instance is plenty for document ingestion.
const queueNums = 4

// DeadTopic returns the topic that holds topic's dead letters.
func DeadTopic(topic string) string { return topic + "-dead" }

// CreateTopic creates topic and DeadTopic(topic) on the broker at brokerAddr
// (host:port), registering them with the NameServer(s) namesrv
// ("host:port", several separated by ';'), plus the retry topic of each
// consumer group in groups. The broker would create a group's retry topic by
// itself, but only once the group exists, and a running client notices a new
// route only every 30 s, so the first retries of a new group would stall;
// creating it before the consumer starts avoids that. Creating an existing
// topic succeeds. It gives up when ctx ends.
func CreateTopic(ctx context.Context, namesrv, brokerAddr, topic string, groups ...string) error {
	addrs, err := splitAddrs(namesrv)
	if err != nil {
		return err
	}
	if brokerAddr, err = resolveAddr(brokerAddr); err != nil {
		return err
	}
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(addrs)))
	if err != nil {
		return fmt.Errorf("rocketmq: admin client: %w", err)
	}
	defer adm.Close()
	create := func(t string, queues int) error {
		err := adm.CreateTopic(ctx,
			admin.WithTopicCreate(t),
			admin.WithBrokerAddrCreate(brokerAddr),
			admin.WithReadQueueNums(queues),
			admin.WithWriteQueueNums(queues),
		)
		if err != nil {
			return fmt.Errorf("rocketmq: create topic %s on %s: %w", t, brokerAddr, err)
		}
		return nil
	}
	for _, t := range []string{topic, DeadTopic(topic)} {
		if err := create(t, queueNums); err != nil {
			return err
		}
	}
	for _, g := range groups {
		// One queue, as the broker itself gives a retry topic.
		if err := create(retryTopicPrefix+g, 1); err != nil {
			return err
		}
	}
	return nil
}

// retryTopicPrefix names a consumer group's retry topic (RocketMQ's MixAll).
const retryTopicPrefix = "%RETRY%"

// ping reports whether one of the NameServers accepts a TCP connection. A
// reachable NameServer is what every client needs first; broker health shows
// up as Publish errors.
func ping(ctx context.Context, addrs []string) error {
	var d net.Dialer
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", a)
		if err == nil {
			c.Close()
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("rocketmq: ping namesrv: %w", errors.Join(errs...))
}

// splitAddrs parses a NameServer list ("a:9876;b:9876" or with commas). The
// client library accepts only IP:port, so host names (a compose service
// name, say) are resolved here, once: a NameServer that later moves to
// another address needs a restart of ragent.
func splitAddrs(namesrv string) ([]string, error) {
	var out []string
	for _, a := range strings.FieldsFunc(namesrv, func(r rune) bool { return r == ';' || r == ',' }) {
		if a = strings.TrimSpace(a); a != "" {
			ip, err := resolveAddr(a)
			if err != nil {
				return nil, err
			}
			out = append(out, ip)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("rocketmq: no NameServer address")
	}
	return out, nil
}

// resolveAddr turns host:port into ip:port, preferring an IPv4 address.
func resolveAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("rocketmq: address %q: %w", addr, err)
	}
	if net.ParseIP(host) != nil {
		return addr, nil
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("rocketmq: resolving %q: %w", host, err)
	}
	ip := ips[0]
	for _, c := range ips {
		if c.To4() != nil {
			ip = c
			break
		}
	}
	return net.JoinHostPort(ip.String(), port), nil
}

// instanceName makes a client instance name unique within the process. The
// library shares one connection set per instance name and shuts it down with
// the first client that closes, so every producer and consumer gets its own.
func instanceName(instance, role string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	if instance == "" {
		instance = "ragent"
	}
	return instance + "-" + role + "-" + hex.EncodeToString(b[:])
}
