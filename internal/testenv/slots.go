package testenv

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxScriptCalls bounds what one client records (a benchmark runs scripts
// millions of times, mostly on the same keys).
const maxScriptCalls = 10000

// slotHook records every script call with two or more keys that a test
// client makes, so check can prove that each one keeps its keys in one Redis
// Cluster slot: the rule that lets every script run on a Cluster. It
// records on every topology, so the single-node pass checks it too.
type slotHook struct {
	mu    sync.Mutex
	calls map[string]scriptCall
	seen  map[string]bool // SHA1 of every script run, whatever its keys
}

// hooks finds the slotHook of a client made by Redis.
var hooks sync.Map // redis.UniversalClient → *slotHook

// ScriptRan reports whether rdb, a client from Redis, has run the script
// whose SHA1 is sha (redis.Script.Hash), so a test can show that it covered
// a script whose keys the slot check then vetted.
func ScriptRan(rdb redis.UniversalClient, sha string) bool {
	h, ok := hooks.Load(rdb)
	if !ok {
		return false
	}
	hook := h.(*slotHook)
	hook.mu.Lock()
	defer hook.mu.Unlock()
	return hook.seen[sha]
}

// scriptCall is one script (by SHA1) called with keys.
type scriptCall struct {
	sha  string
	keys []string
}

func (h *slotHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slotHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd.Args())
		return next(ctx, cmd)
	}
}

func (h *slotHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.record(cmd.Args())
		}
		return next(ctx, cmds)
	}
}

func (h *slotHook) record(args []any) {
	c, ok := parseScriptCall(args)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen, h.calls = map[string]bool{}, map[string]scriptCall{}
	}
	h.seen[c.sha] = true
	if len(c.keys) > 1 && len(h.calls) < maxScriptCalls {
		h.calls[c.sha+"\x00"+strings.Join(c.keys, "\x00")] = c
	}
}

// parseScriptCall reads an EVAL or EVALSHA (or their _RO forms) command:
// name, script or SHA1, the number of keys, the keys, the arguments. An EVAL
// is named by its source's SHA1, as its EVALSHA would be.
func parseScriptCall(args []any) (scriptCall, bool) {
	if len(args) < 3 {
		return scriptCall{}, false
	}
	name, _ := args[0].(string)
	script := fmt.Sprint(args[1])
	switch strings.ToLower(name) {
	case "eval", "eval_ro":
		sum := sha1.Sum([]byte(script))
		script = hex.EncodeToString(sum[:])
	case "evalsha", "evalsha_ro":
	default:
		return scriptCall{}, false
	}
	n, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil || n < 0 || 3+n > len(args) {
		return scriptCall{}, false
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint(args[3+i])
	}
	return scriptCall{sha: script, keys: keys}, true
}

// check asks the test Redis Cluster (CLUSTER KEYSLOT, the server's own
// hashing) for the slot of every key recorded and fails t for each script
// call whose keys are in more than one slot. Without a reachable cluster it
// fails under RAGENT_REQUIRE_SERVICES=1 and is skipped otherwise.
func (h *slotHook) check(t testing.TB) {
	t.Helper()
	h.mu.Lock()
	calls := h.calls
	h.calls = map[string]scriptCall{}
	h.mu.Unlock()
	if len(calls) == 0 {
		return
	}
	list := make([]scriptCall, 0, len(calls))
	for _, c := range calls {
		list = append(list, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad, err := crossSlot(ctx, clusterAddrs()[0], list)
	if err != nil {
		if Required() {
			t.Errorf("script key slots not checked: the test Redis Cluster is unavailable (RAGENT_REQUIRE_SERVICES=1): %v", err)
		}
		return
	}
	for _, b := range bad {
		t.Errorf("a script is called with keys in several Redis Cluster slots: %s", b)
	}
}

// crossSlot returns a description of each call whose keys CLUSTER KEYSLOT,
// asked of the cluster node at addr, puts in more than one slot.
func crossSlot(ctx context.Context, addr string, calls []scriptCall) ([]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 2 * time.Second, MaxRetries: -1})
	defer c.Close()
	slots := map[string]*redis.IntCmd{}
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, call := range calls {
			for _, k := range call.keys {
				if slots[k] == nil {
					slots[k] = p.ClusterKeySlot(ctx, k)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, call := range calls {
		first := slots[call.keys[0]].Val()
		for _, k := range call.keys[1:] {
			if slots[k].Val() != first {
				bad = append(bad, fmt.Sprintf("script %s, keys %q", call.sha, call.keys))
				break
			}
		}
	}
	return bad, nil
}
