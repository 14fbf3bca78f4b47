package dlock

import "github.com/dlockio/dlock/observe"

// Kind is a type of lock: the one [Client.Describe] found holding a name,
// or the one an observer's event is about. It is defined in package
// observe, whose events carry it.
type Kind = observe.Kind

// The kinds of lock. Describe tells apart those Redis can: it says
// KindMutex for a Mutex, a FairMutex with nobody queued and a MultiLock's
// lock (one lock in Redis), and KindRead, KindWrite or KindReentrant for
// the read-write locks (see [admin.LockInfo]); never KindMulti or KindRedlock.
const (
	KindMutex     Kind = observe.KindMutex     // [Mutex]
	KindReentrant Kind = observe.KindReentrant // [ReentrantMutex]
	KindRead      Kind = observe.KindRead      // [RWMutex], a read lock
	KindWrite     Kind = observe.KindWrite     // [RWMutex], the write lock
	KindFair      Kind = observe.KindFair      // [FairMutex]
	KindSemaphore Kind = observe.KindSemaphore // [Semaphore]
	KindMulti     Kind = observe.KindMulti     // [MultiLock]
	KindElection  Kind = observe.KindElection  // [Election]
	KindRedlock   Kind = observe.KindRedlock   // [RedlockMutex]
)
