package dlock

// Kind is a type of lock: the one an observer's event is about (see
// [Observer]), or the one [Client.Describe] found holding a name.
type Kind string

// The kinds of lock. Describe tells apart those Redis can: it says
// KindMutex for a Mutex, a FairMutex with nobody queued and a MultiLock's
// lock (one lock in Redis), and KindRead, KindWrite or KindReentrant for
// the read-write locks (see [LockInfo]); never KindMulti or KindRedlock.
const (
	KindMutex     Kind = "mutex"     // [Mutex]
	KindReentrant Kind = "reentrant" // [ReentrantMutex]
	KindRead      Kind = "rw.read"   // [RWMutex], a read lock
	KindWrite     Kind = "rw.write"  // [RWMutex], the write lock
	KindFair      Kind = "fair"      // [FairMutex]
	KindSemaphore Kind = "semaphore" // [Semaphore]
	KindMulti     Kind = "multi"     // [MultiLock]
	KindElection  Kind = "election"  // [Election]
	KindRedlock   Kind = "redlock"   // [RedlockMutex]
)
