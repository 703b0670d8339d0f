package idempotent

import (
	"embed"

	"github.com/ragent-go/ragent/internal/lease"
)

// The package's scripts, laid out as every package's: lua/*.lua, built with
// lease.Script. The owner-token lease scripts live in internal/lease.
var (
	//go:embed lua/*.lua
	luaFiles embed.FS

	consumeBeginScript = lease.Script(luaFiles, "consume_begin.lua")
	keyBeginScript     = lease.Script(luaFiles, "key_begin.lua")
	keyCompleteScript  = lease.Script(luaFiles, "key_complete.lua")
	keyAbortScript     = lease.Script(luaFiles, "key_abort.lua")
)
