package sandbox

import (
	"testing"
	"time"
)

func TestDeleteBackoff(t *testing.T) {
	for attempt, want := range map[int]time.Duration{
		1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 16 * time.Second,
		6: 30 * time.Second, 7: 30 * time.Second, 1000: 30 * time.Second,
	} {
		if got := deleteBackoff(attempt); got != want {
			t.Errorf("deleteBackoff(%d) = %v, want %v", attempt, got, want)
		}
	}
}
