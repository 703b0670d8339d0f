package rocketmq

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// SetClientLogger routes the RocketMQ client library's logging into log,
// dropping its debug and info records (rebalances, heartbeats, route updates
// several times a minute). The library keeps its logger in a package
// variable that it reads without synchronisation, so this sets process-wide
// state: call it once, before any Producer or Consumer exists (cmd/ragent does).
func SetClientLogger(log *slog.Logger) {
	rlog.SetLogger(&clientLogger{log: log.With("component", "rocketmq-client"), min: slog.LevelWarn})
}

// clientLogger adapts slog to rlog.Logger.
type clientLogger struct {
	log *slog.Logger
	min slog.Level // fixed at construction; Level is ignored to stay race-free
}

func (l *clientLogger) emit(level slog.Level, msg string, fields map[string]any) {
	if level < l.min || (msg == "" && len(fields) == 0) {
		return
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, slog.String(k, fmt.Sprint(fields[k])))
	}
	l.log.LogAttrs(context.Background(), level, strings.TrimSpace(msg), attrs...)
}

func (l *clientLogger) Debug(msg string, f map[string]any)   { l.emit(slog.LevelDebug, msg, f) }
func (l *clientLogger) Info(msg string, f map[string]any)    { l.emit(slog.LevelInfo, msg, f) }
func (l *clientLogger) Warning(msg string, f map[string]any) { l.emit(slog.LevelWarn, msg, f) }
func (l *clientLogger) Error(msg string, f map[string]any)   { l.emit(slog.LevelError, msg, f) }

// Fatal logs at error level; unlike the library's default logger it does not
// exit the process, which is not a library's decision to make.
func (l *clientLogger) Fatal(msg string, f map[string]any) { l.emit(slog.LevelError, msg, f) }
func (l *clientLogger) Level(string)                       {}
func (l *clientLogger) OutputPath(string) error            { return nil }
