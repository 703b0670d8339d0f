//go:build !race

// The RocketMQ client library reports data races inside itself: see
// ingest_rocketmq_test.go.

package main

import (
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// TestIngestFairRocketMQ is TestIngestFairAcrossKnowledgeBases on the
// RocketMQ driver, with a larger import and a fixed limit: the producer
// spreads the messages over the topic's queues, so without the relay's
// bound the small upload's message sits behind its queue's share of the
// import only, and with 80 documents it was ready before half of them in
// one run of three. With 160 and no bound (ingestInFlightPerKB raised)
// 150 to 158 were ready before it; with the bound 11 to 21.
func TestIngestFairRocketMQ(t *testing.T) {
	fake := newFakeEmbedServer(t, 32)
	cfg := embedConfig(t, fake, 4)
	cfg.MQDriver, cfg.RocketMQNamesrv = "rocketmq", testenv.RocketMQNamesrv(t)
	checkFair(t, fake, cfg, 90*time.Second, 160, 40)
}
