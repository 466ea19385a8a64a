package sandbox

import "sync"

// idLocks serializes operations on one sandbox. An id's mutex exists while someone holds
// it or waits for it and is dropped after the last of them: a deleted sandbox leaves no
// entry, and no caller can get a second, fresh mutex for an id while the first is held
// (what deleting a sync.Map entry after unlocking allowed: a waiter and a newcomer on
// two different mutexes).
type idLocks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	mu   sync.Mutex
	refs int // holders and waiters
}

// lock locks id's mutex and returns its unlock.
func (l *idLocks) lock(id string) func() {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*idLock{}
	}
	e := l.m[id]
	if e == nil {
		e = &idLock{}
		l.m[id] = e
	}
	e.refs++
	l.mu.Unlock()
	e.mu.Lock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Unlock()
			l.mu.Lock()
			if e.refs--; e.refs == 0 {
				delete(l.m, id)
			}
			l.mu.Unlock()
		})
	}
}

// held counts the ids with a holder or waiter (tests).
func (l *idLocks) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
