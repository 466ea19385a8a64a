package egress

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/moatdev/moat/internal/egress/intercept"
)

// TestLoadCAConcurrent: concurrent loads of one sandbox's CA give the same CA (made once,
// and the one saved), and loads of different sandboxes each give their own; a new Manager
// (a restarted daemon) reads the saved ones back.
func TestLoadCAConcurrent(t *testing.T) {
	dir := t.TempDir()
	m := New(Config{CADir: dir})
	const n = 8
	got := make([][]*intercept.CA, n)
	var wg sync.WaitGroup
	for i := range n {
		got[i] = make([]*intercept.CA, 4)
		for j := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ca, err := m.loadCA(fmt.Sprintf("sb-%02d", i))
				if err != nil {
					t.Error(err)
				}
				got[i][j] = ca
			}()
		}
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range n {
		first := string(got[i][0].CertPEM())
		for j := range 4 {
			if string(got[i][j].CertPEM()) != first {
				t.Errorf("sandbox %d: two CAs from concurrent loads", i)
			}
		}
		if seen[first] {
			t.Errorf("sandbox %d shares a CA with another", i)
		}
		seen[first] = true
		again, err := New(Config{CADir: dir}).loadCA(fmt.Sprintf("sb-%02d", i))
		if err != nil || string(again.CertPEM()) != first {
			t.Errorf("sandbox %d: the saved CA differs from the one in use (%v)", i, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != n {
		t.Errorf("%d files in the CA directory, want %d", len(entries), n)
	}
	if len(m.cas.loading) != 0 {
		t.Errorf("loading locks left: %d", len(m.cas.loading))
	}
}
