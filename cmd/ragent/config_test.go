package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service/retrieve"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestConfigDefaults(t *testing.T) {
	c, err := loadConfig(envOf())
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]any{
		"HTTPAddr": c.HTTPAddr, "RedisPrefix": c.RedisPrefix, "MQDriver": c.MQDriver, "LLMProvider": c.LLMProvider,
		"EmbedDim": c.EmbedDim, "ChatMaxConcurrent": c.ChatMaxConcurrent, "ChatMaxWait": c.ChatMaxWait,
		"ChatLease": c.ChatLease, "ChatPollInterval": c.ChatPollInterval, "ChatOnRedisError": c.ChatOnRedisError,
		"ChatMaxQueue": c.ChatMaxQueue, "ChatMaxQueuedPerUser": c.ChatMaxQueuedPerUser, "UploadMaxBytes": c.UploadMaxBytes,
		"WorkerID": c.WorkerID, "Demo": c.Demo, "SearchMinVectorScore": c.SearchMinVectorScore,
		"IngestParser": c.IngestParser, "IngestParseTimeout": c.IngestParseTimeout, "IngestParserMemory": c.IngestParserMemory,
		"IngestMaxTextBytes": c.IngestMaxTextBytes, "IngestMaxChunks": c.IngestMaxChunks,
	} {
		want := map[string]any{
			"HTTPAddr": ":8080", "RedisPrefix": "ragent:", "MQDriver": "redis", "LLMProvider": "offline",
			"EmbedDim": 512, "ChatMaxConcurrent": 10, "ChatMaxWait": 15 * time.Second,
			"ChatLease": 30 * time.Second, "ChatPollInterval": 200 * time.Millisecond, "ChatOnRedisError": "reject",
			"ChatMaxQueue": 1000, "ChatMaxQueuedPerUser": 3, "UploadMaxBytes": int64(50 << 20),
			"WorkerID": -1, "Demo": true, "SearchMinVectorScore": retrieve.OfflineMinVectorScore,
			"IngestParser": "process", "IngestParseTimeout": 2 * time.Minute, "IngestParserMemory": int64(1 << 30),
			"IngestMaxTextBytes": int64(20 << 20), "IngestMaxChunks": 20_000,
		}[name]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"bad int", []string{"RAGENT_CHAT_MAX_CONCURRENT", "ten"}, "RAGENT_CHAT_MAX_CONCURRENT"},
		{"bad duration", []string{"RAGENT_CHAT_MAX_WAIT", "15"}, "RAGENT_CHAT_MAX_WAIT"},
		{"bad bool", []string{"RAGENT_DEMO", "maybe"}, "RAGENT_DEMO"},
		{"unknown driver", []string{"RAGENT_MQ_DRIVER", "kafka"}, "RAGENT_MQ_DRIVER"},
		{"openai needs a model", []string{"RAGENT_LLM_PROVIDER", "openai", "RAGENT_LLM_BASE_URL", "http://x"}, "RAGENT_LLM_CHAT_MODEL"},
		{"embedding needs a dimension", []string{"RAGENT_EMBEDDING_PROVIDER", "openai", "RAGENT_EMBEDDING_MODEL", "m"}, "RAGENT_EMBEDDING_DIM"},
		{"short lease", []string{"RAGENT_CHAT_LEASE", "1s"}, "RAGENT_CHAT_LEASE"},
		{"worker id range", []string{"RAGENT_WORKER_ID", "1024"}, "RAGENT_WORKER_ID"},
		{"short secret", []string{"RAGENT_AUTH_SECRET", "short"}, "RAGENT_AUTH_SECRET"},
		{"zero queue", []string{"RAGENT_CHAT_MAX_QUEUE", "0"}, "RAGENT_CHAT_MAX_QUEUE"},
		{"per-user login limit below per-address", []string{"RAGENT_LOGIN_MAX_FAILURES", "10", "RAGENT_LOGIN_MAX_FAILURES_PER_USER", "5"}, "RAGENT_LOGIN_MAX_FAILURES_PER_USER"},
		{"zero login window", []string{"RAGENT_LOGIN_FAIL_WINDOW", "0s"}, "RAGENT_LOGIN_FAIL_WINDOW"},
		{"bad proxy", []string{"RAGENT_TRUSTED_PROXIES", "10.0.0.0/8,proxy.local"}, "RAGENT_TRUSTED_PROXIES"},
		{"origin with a path", []string{"RAGENT_ALLOWED_ORIGINS", "https://rag.example.com/app"}, "RAGENT_ALLOWED_ORIGINS"},
		{"zero body timeout", []string{"RAGENT_HTTP_BODY_TIMEOUT", "0s"}, "RAGENT_HTTP_BODY_TIMEOUT"},
		{"unknown parser", []string{"RAGENT_INGEST_PARSER", "thread"}, "RAGENT_INGEST_PARSER"},
		{"tiny parser memory", []string{"RAGENT_INGEST_PARSER_MEMORY", "1000"}, "RAGENT_INGEST_PARSER_MEMORY"},
		{"zero text cap", []string{"RAGENT_INGEST_MAX_TEXT_BYTES", "0"}, "RAGENT_INGEST_MAX_TEXT_BYTES"},
		{"zero chunk cap", []string{"RAGENT_INGEST_MAX_CHUNKS", "0"}, "RAGENT_INGEST_MAX_CHUNKS"},
		{"zero parse timeout", []string{"RAGENT_INGEST_PARSE_TIMEOUT", "0s"}, "RAGENT_INGEST_PARSE_TIMEOUT"},
		{"sentinel and cluster", []string{"RAGENT_REDIS_SENTINEL_ADDRS", "s:26379", "RAGENT_REDIS_SENTINEL_MASTER", "m",
			"RAGENT_REDIS_CLUSTER_ADDRS", "n:6379"}, "RAGENT_REDIS_SENTINEL_ADDRS and RAGENT_REDIS_CLUSTER_ADDRS are both set"},
		{"sentinel without a master", []string{"RAGENT_REDIS_SENTINEL_ADDRS", "s:26379"}, "RAGENT_REDIS_SENTINEL_MASTER is required"},
		{"master without sentinels", []string{"RAGENT_REDIS_SENTINEL_MASTER", "m"}, "need RAGENT_REDIS_SENTINEL_ADDRS"},
		{"address without a port", []string{"RAGENT_REDIS_CLUSTER_ADDRS", "n1:7000,n2"}, "RAGENT_REDIS_CLUSTER_ADDRS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadConfig(envOf(tt.env...))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func TestConfigHTTPEdge(t *testing.T) {
	c, err := loadConfig(envOf())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.TrustedProxies) != 0 || c.MetricsAddr != "127.0.0.1:9464" || c.MetricsPublic || c.Tracing || c.HTTPBodyTimeout != 30*time.Second ||
		c.HTTPUploadTimeout != 430*time.Second {
		t.Fatalf("defaults: proxies %v, metrics %q, body %s, upload %s", c.TrustedProxies, c.MetricsAddr, c.HTTPBodyTimeout, c.HTTPUploadTimeout)
	}
	c, err = loadConfig(envOf("RAGENT_TRUSTED_PROXIES", " 10.1.2.3/8, 127.0.0.1 ,::1",
		"RAGENT_ALLOWED_ORIGINS", "HTTPS://Rag.Example.com:443", "RAGENT_HTTP_UPLOAD_TIMEOUT", "1m"))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.TrustedProxies); got != "[10.0.0.0/8 127.0.0.1/32 ::1/128]" {
		t.Errorf("proxies %s", got)
	}
	if fmt.Sprint(c.AllowedOrigins) != "[https://rag.example.com]" || c.HTTPUploadTimeout != time.Minute {
		t.Errorf("origins %v, upload timeout %s", c.AllowedOrigins, c.HTTPUploadTimeout)
	}
}

func TestConfigLogMasksSecrets(t *testing.T) {
	c, err := loadConfig(envOf(
		"RAGENT_DATABASE_URL", "postgres://u:hunter2@db:5432/ragent",
		"RAGENT_REDIS_URL", "redis://:redispass@cache:6379/0",
		"RAGENT_LLM_PROVIDER", "openai", "RAGENT_LLM_BASE_URL", "http://llm", "RAGENT_LLM_CHAT_MODEL", "m",
		"RAGENT_LLM_API_KEY", "sk-secret", "RAGENT_ADMIN_PASSWORD", "adminpass",
		"RAGENT_AUTH_SECRET", strings.Repeat("s", 40),
	))
	if err != nil {
		t.Fatal(err)
	}
	logged := fmt.Sprint(c.logAttrs()...)
	for _, secret := range []string{"hunter2", "redispass", "sk-secret", "adminpass", strings.Repeat("s", 40)} {
		if strings.Contains(logged, secret) {
			t.Errorf("the start-up log shows a secret: %s", secret)
		}
	}
}

func TestConfigOutboxRetention(t *testing.T) {
	c, err := loadConfig(envOf())
	if err != nil || c.OutboxRetention != 7*24*time.Hour {
		t.Fatalf("default retention %v (err %v), want 168h", c.OutboxRetention, err)
	}
	if c, err = loadConfig(envOf("RAGENT_OUTBOX_RETENTION", "36h")); err != nil || c.OutboxRetention != 36*time.Hour {
		t.Fatalf("retention %v (err %v), want 36h", c.OutboxRetention, err)
	}
	for _, v := range []string{"0s", "-1h", "7d"} {
		if _, err := loadConfig(envOf("RAGENT_OUTBOX_RETENTION", v)); err == nil || !strings.Contains(err.Error(), "RAGENT_OUTBOX_RETENTION") {
			t.Errorf("RAGENT_OUTBOX_RETENTION=%s: error %v, want one naming the variable", v, err)
		}
	}
}

// TestConfigReference holds the configuration reference to the settings
// table: docs/configuration.md is what writeConfigReference makes (run go
// generate ./cmd/ragent after changing either), every setting has exactly
// one row and every row's variables are settings, and a default the page
// shows as a literal (`30s`) is the one the loader uses; "—" means none.
func TestConfigReference(t *testing.T) {
	var want strings.Builder
	if err := writeConfigReference(&want); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(page) != want.String() {
		t.Error("docs/configuration.md is not what the settings table makes: run go generate ./cmd/ragent")
	}
	documented := map[string]string{} // variable -> its default cell
	for _, d := range settingDocs {
		names := strings.Split(d.names, ", ")
		defs := []string{d.def}
		if len(names) > 1 {
			defs = strings.Split(d.def, ", ")
		}
		for i, name := range names {
			def := defs[len(defs)-1]
			if i < len(defs) {
				def = defs[i]
			}
			if _, dup := documented[name]; dup {
				t.Errorf("%s has more than one row in the configuration reference", name)
			}
			documented[name] = def
		}
	}
	var c Config
	known := map[string]bool{}
	for _, s := range c.settings() {
		known[s.name] = true
		cell, ok := documented[s.name]
		switch {
		case !ok:
			t.Errorf("%s is not in the configuration reference", s.name)
		case strings.HasPrefix(cell, "`"):
			if shown := strings.SplitN(cell, "`", 3)[1]; shown != s.def {
				t.Errorf("%s: documented default %q, code default %q", s.name, shown, s.def)
			}
		case strings.HasPrefix(cell, "—") && s.def != "":
			t.Errorf("%s: documented without a default, code default %q", s.name, s.def)
		}
	}
	for name := range documented {
		if !known[name] {
			t.Errorf("the configuration reference documents %s, which no setting reads", name)
		}
	}
	// A row of the page is a row of the table: nothing else lists a variable.
	for _, line := range strings.Split(string(page), "\n") {
		if strings.HasPrefix(line, "| `RAGENT_") {
			for _, name := range strings.Split(strings.Trim(strings.SplitN(line, " | ", 2)[0], "| "), ", ") {
				if !known[strings.Trim(name, "`")] {
					t.Errorf("docs/configuration.md lists %s, which no setting reads", name)
				}
			}
		}
	}
}

// TestConfigLogListsEverySetting: the start-up log names every setting.
func TestConfigLogListsEverySetting(t *testing.T) {
	c, err := loadConfig(envOf())
	if err != nil {
		t.Fatal(err)
	}
	attrs := c.logAttrs()
	if len(attrs) != 2*len(c.settings()) {
		t.Fatalf("%d log attributes for %d settings", len(attrs)/2, len(c.settings()))
	}
	if attrs[0] != "http_addr" || attrs[1] != ":8080" {
		t.Errorf("first attribute %v=%v", attrs[0], attrs[1])
	}
}
