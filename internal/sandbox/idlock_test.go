package sandbox

import (
	"sync"
	"testing"
	"time"
)

// TestIDLocks: one id's lock excludes every other holder, also one that comes after a
// waiter was let in (the case a deleted-after-unlock entry got wrong); different ids do not
// wait for each other; nothing stays in the table once everyone is done.
func TestIDLocks(t *testing.T) {
	var l idLocks
	var inside, maxInside int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := l.lock("sb-1")
			mu.Lock()
			inside++
			maxInside = max(maxInside, inside)
			mu.Unlock()
			if i%8 == 0 {
				time.Sleep(time.Millisecond)
			}
			mu.Lock()
			inside--
			mu.Unlock()
			unlock()
			unlock() // a second call does nothing
		}()
	}
	wg.Wait()
	if maxInside != 1 {
		t.Fatalf("%d holders of one id's lock at once", maxInside)
	}
	if n := l.held(); n != 0 {
		t.Fatalf("%d entries left after every holder left", n)
	}

	// A holds; B waits; A leaves; C arrives while B holds: C must wait for B.
	unlockA := l.lock("sb-2")
	bIn := make(chan func())
	go func() { bIn <- l.lock("sb-2") }()
	waitFor(t, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.m["sb-2"].refs == 2 })
	unlockA()
	unlockB := <-bIn
	cIn := make(chan func())
	go func() { cIn <- l.lock("sb-2") }()
	select {
	case <-cIn:
		t.Fatal("a newcomer got the lock while the waiter let in after the first holder held it")
	case <-time.After(50 * time.Millisecond):
	}
	// Another id is not held up.
	l.lock("sb-3")()
	unlockB()
	(<-cIn)()
	if n := l.held(); n != 0 {
		t.Fatalf("%d entries left", n)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
	}
}
