package ratelimit

import (
	"embed"

	"github.com/ragent-go/ragent/internal/lease"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// scripts are the Lua scripts every limiter and semaphore runs. They are
// stateless, so one set serves all of them. clock.lua (Redis TIME) and lib.lua
// (the queue's shared functions) are preludes, prepended to the scripts that
// use them. fence.lua is the failover fence's prelude (lua/fence.lua,
// fence.go): the grant scripts and renew take its key and arguments last.
var (
	enqueueScript = lease.Script(luaFiles, "clock.lua", "lib.lua", "fence.lua", "enqueue.lua")
	claimScript   = lease.Script(luaFiles, "clock.lua", "lib.lua", "fence.lua", "claim.lua")
	leaveScript   = lease.Script(luaFiles, "clock.lua", "lib.lua", "leave.lua")
	releaseScript = lease.Script(luaFiles, "clock.lua", "lib.lua", "release.lua")
	renewScript   = lease.Script(luaFiles, "clock.lua", "fence.lua", "renew.lua")
	tryScript     = lease.Script(luaFiles, "clock.lua", "fence.lua", "try.lua")
	statsScript   = lease.Script(luaFiles, "clock.lua", "stats.lua")
	rateScript    = lease.Script(luaFiles, "clock.lua", "rate.lua")
	pauseScript   = lease.Script(luaFiles, "pause.lua")
)
