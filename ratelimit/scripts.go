package ratelimit

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// scripts are the Lua scripts every limiter and semaphore runs. They are
// stateless, so one set serves all of them. redis.Script.Run tries EVALSHA
// first and falls back to EVAL, so a script cache flushed by a Redis restart
// costs one extra round trip, never an error.
var (
	enqueueScript = newScript("clock.lua", "lib.lua", "enqueue.lua")
	claimScript   = newScript("clock.lua", "lib.lua", "claim.lua")
	leaveScript   = newScript("clock.lua", "lib.lua", "leave.lua")
	releaseScript = newScript("clock.lua", "lib.lua", "release.lua")
	renewScript   = newScript("clock.lua", "renew.lua")
	tryScript     = newScript("clock.lua", "try.lua")
	statsScript   = newScript("clock.lua", "stats.lua")
)

// newScript concatenates the named files: Redis has no includes, so shared
// functions are prepended to the scripts that use them.
func newScript(files ...string) *redis.Script {
	var src []byte
	for _, f := range files {
		b, err := luaFiles.ReadFile("lua/" + f)
		if err != nil {
			panic("ratelimit: missing embedded script " + f)
		}
		src = append(src, b...)
		src = append(src, '\n')
	}
	return redis.NewScript(string(src))
}
