// Package scripts holds the Lua scripts dlock runs in Redis, one file per
// operation. Each file's header states its KEYS, ARGV and return values.
//
// Scripts run by SHA (EVALSHA) and fall back to EVAL when the server answers
// NOSCRIPT, as after SCRIPT FLUSH or a restart: see [redis.Script.Run].
//
// Scripts that free a lock call wake_next, defined once in wake_next.lua and
// prepended to them here: Redis scripts cannot import one another.
package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed wake_next.lua
	wakeNext string
	//go:embed mutex_acquire.lua
	mutexAcquire string
	//go:embed mutex_release.lua
	mutexRelease string
	//go:embed mutex_extend.lua
	mutexExtend string
	//go:embed mutex_ttl.lua
	mutexTTL string
	//go:embed mutex_abandon.lua
	mutexAbandon string
)

// Mutex scripts.
var (
	MutexAcquire = redis.NewScript(mutexAcquire)
	MutexRelease = redis.NewScript(wakeNext + mutexRelease)
	MutexExtend  = redis.NewScript(mutexExtend)
	MutexTTL     = redis.NewScript(mutexTTL)
	MutexAbandon = redis.NewScript(wakeNext + mutexAbandon)
)
