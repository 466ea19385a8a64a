package apiserver

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// memRecords is an E2BBuildRecords in memory (the store's is tested in internal/store).
type memRecords struct {
	mu   sync.Mutex
	rows map[string][]byte
	ids  []string
}

func (m *memRecords) PutE2BBuild(_ context.Context, id, _, _ string, _ time.Time, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.rows[id]; !ok {
		m.ids = append(m.ids, id)
	}
	m.rows[id] = data
	return nil
}

func (m *memRecords) E2BBuilds(context.Context, int) ([][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out [][]byte
	for _, id := range m.ids {
		out = append(out, m.rows[id])
	}
	return out, nil
}

// TestE2BInterrupt: only a building build becomes an error, naming the restart and its
// step; ready, error and waiting ones stay.
func TestE2BInterrupt(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		status, step string
		changed      bool
		msg          string
	}{
		{"building", "3", true, "the daemon restarted during the build (at step 3)"},
		{"building", "base", true, "the daemon restarted during the build; its sandbox is gone"},
		{"waiting", "base", false, ""},
		{"ready", "finalize", false, ""},
		{"error", "2", false, ""},
	} {
		b := &e2bBuild{id: "b", status: c.status, step: c.step}
		if got := e2bInterrupt(b, now); got != c.changed {
			t.Errorf("%s: changed %v, want %v", c.status, got, c.changed)
		}
		if !c.changed {
			if b.status != c.status || b.reason != nil {
				t.Errorf("%s: became %s %+v", c.status, b.status, b.reason)
			}
			continue
		}
		if b.status != "error" || b.reason == nil || !strings.Contains(b.reason.Message, c.msg) || b.reason.Step != c.step || len(b.logs) != 1 {
			t.Errorf("%s at %s: %s %+v %+v", c.status, c.step, b.status, b.reason, b.logs)
		}
	}
}

// TestE2BBuildRecordsReload: records written by one server are read back by the next:
// the running one as an error (stored so), the ready one with its log and as the
// template's latest build; without interrupted (another daemon shares the data) the
// running one stays building.
func TestE2BBuildRecordsReload(t *testing.T) {
	recs := &memRecords{rows: map[string][]byte{}}
	s1 := New(Deps{Sandboxes: &fakeSandboxes{}, Templates: noTemplates{}, Log: slog.New(slog.DiscardHandler)})
	s1.SetE2BTemplates(&fakeE2BTemplates{})
	s1.SetE2BBuildRecords(recs, true)
	done := &e2bBuild{id: "b-done", template: "app", owner: "key-a", requester: "key-a", status: "ready", step: "finalize", cpu: 2,
		logs: []e2bLogEntry{{Message: "step 1/1: RUN true"}}, created: time.Now().Add(-time.Minute)}
	running := &e2bBuild{id: "b-run", template: "app", status: "building", step: "1", created: time.Now()}
	s1.e2bSaveBuild(done, true)
	s1.e2bSaveBuild(running, true)

	s2 := New(Deps{Sandboxes: &fakeSandboxes{}, Templates: noTemplates{}, Log: slog.New(slog.DiscardHandler)})
	s2.SetE2BTemplates(&fakeE2BTemplates{})
	s2.SetE2BBuildRecords(recs, true)
	st := s2.e2bt
	if b := st.builds["b-done"]; b == nil || b.status != "ready" || len(b.logs) != 1 || b.owner != "key-a" || b.requester != "key-a" {
		t.Errorf("finished build after the restart: %+v", b)
	}
	if m := st.meta["app"]; m.buildID != "b-done" || m.cpu != 2 {
		t.Errorf("template meta after the restart: %+v", m)
	}
	if b := st.builds["b-run"]; b == nil || b.status != "error" || b.reason == nil || !strings.Contains(b.reason.Message, e2bRestartMessage) {
		t.Errorf("running build after the restart: %+v", b)
	}
	if !strings.Contains(string(recs.rows["b-run"]), e2bRestartMessage) {
		t.Errorf("the interrupted build was not stored as an error: %s", recs.rows["b-run"])
	}

	recs2 := &memRecords{rows: map[string][]byte{}}
	s1.e2bt.records = recs2
	s1.e2bSaveBuild(&e2bBuild{id: "b-run2", template: "app", status: "building", step: "1"}, true)
	s3 := New(Deps{Sandboxes: &fakeSandboxes{}, Templates: noTemplates{}, Log: slog.New(slog.DiscardHandler)})
	s3.SetE2BTemplates(&fakeE2BTemplates{})
	s3.SetE2BBuildRecords(recs2, false)
	if b := s3.e2bt.builds["b-run2"]; b == nil || b.status != "building" {
		t.Errorf("without interrupted: %+v", b)
	}
}
