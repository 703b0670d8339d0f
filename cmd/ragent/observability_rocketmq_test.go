//go:build !race

// The RocketMQ client library reports data races inside itself: see
// ingest_rocketmq_test.go.

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// On the RocketMQ driver the queue metrics count as on Redis Streams (lag
// is not reported: the client cannot tell), and a document's trace still
// continues from its upload across the queue.
func TestObservabilityRocketMQ(t *testing.T) {
	recv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.srv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	cfg := rocketmqConfig(t)
	cfg.Tracing = true
	in, c, kb := ingestEnv(t, cfg)
	d := c.uploadAccepted(kb, "traced.txt", []byte(strings.Repeat("Axolotls regrow limbs, hearts and parts of their brains. ", 20)))
	if got := c.waitDone(d.ID, 90*time.Second); got.Status != "ready" { // a new push consumer needs a rebalance first
		t.Fatalf("document: %+v", got)
	}
	testenv.Eventually(t, 30*time.Second, "the delivery counted", func() bool {
		return sample(gathered(t, in), "ragent_mq_delivered_total", "topic", "ragent-document-ingest") >= 1
	})
	mfs := gathered(t, in)
	if v := sample(mfs, "ragent_mq_published_total", "topic", "ragent-document-ingest", "outcome", "ok"); v < 1 {
		t.Errorf("published %v", v)
	}
	if n := len(mfs["ragent_mq_lag"].GetMetric()); n != 0 {
		t.Errorf("ragent_mq_lag has %d series on RocketMQ", n)
	}
	testenv.Eventually(t, 30*time.Second, "the document's spans", func() bool {
		return len(recv.named("ingest.index")) > 0 && len(recv.named("ingest.upload")) > 0
	})
	if recv.child(recv.named("ingest.upload")[0], "ingest.document") == nil {
		t.Fatalf("no ingest.document span under the upload's span")
	}
}
