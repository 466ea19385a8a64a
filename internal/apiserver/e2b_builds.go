package apiserver

// Build records of E2B templates as code kept across daemon restarts (docs/e2b-templates.md):
// every build's status, log entries, failing step and who asked are written to the
// daemon's SQLite store (internal/store e2bbuilds.go) as they change, and read back when
// the daemon starts; a build that was running when the daemon died is then an error.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// E2BBuildRecords keeps E2B build records (the daemon's *store.Store).
type E2BBuildRecords interface {
	// PutE2BBuild stores or replaces build id's record (data: JSON).
	PutE2BBuild(ctx context.Context, id, template, status string, created time.Time, data []byte) error
	// E2BBuilds returns the keep newest records, oldest first, and deletes older ones.
	E2BBuilds(ctx context.Context, keep int) ([][]byte, error)
}

// e2bSaveEvery is how often a running build's record is written at most between steps:
// a daemon killed mid-build loses at most this much of the step's log.
const e2bSaveEvery = time.Second

// e2bBuildRec is the stored form of an e2bBuild.
type e2bBuildRec struct {
	ID        string          `json:"id"`
	Template  string          `json:"template"`
	Scope     string          `json:"scope"`
	Owner     string          `json:"owner"`
	Requester string          `json:"requester"`
	Tags      []string        `json:"tags,omitempty"`
	CPU       int             `json:"cpu,omitempty"`
	Memory    int             `json:"memory,omitempty"`
	Status    string          `json:"status"`
	Step      string          `json:"step"`
	Logs      []e2bLogEntry   `json:"logs"`
	Reason    *e2bBuildReason `json:"reason,omitempty"`
	Output    []string        `json:"output,omitempty"`
	Created   time.Time       `json:"created"`
}

// recordLocked copies b for storing (the state's mu held).
func (b *e2bBuild) recordLocked() e2bBuildRec {
	return e2bBuildRec{ID: b.id, Template: b.template, Scope: b.scope, Owner: b.owner, Requester: b.requester,
		Tags: slices.Clone(b.tags), CPU: b.cpu, Memory: b.memory, Status: b.status, Step: b.step,
		Logs: slices.Clone(b.logs), Reason: b.reason, Output: slices.Clone(b.output), Created: b.created}
}

func (r e2bBuildRec) build() *e2bBuild {
	return &e2bBuild{id: r.ID, template: r.Template, scope: r.Scope, owner: r.Owner, requester: r.Requester,
		tags: r.Tags, cpu: r.CPU, memory: r.Memory, status: r.Status, step: r.Step, logs: r.Logs,
		reason: r.Reason, output: r.Output, created: r.Created}
}

// SetE2BBuildRecords keeps E2B build records in r and reads back those stored before.
// interrupted: this daemon is the only one on its data (it reconciled), so a build stored
// as building was cut off by a restart: it becomes an error.
func (s *Server) SetE2BBuildRecords(r E2BBuildRecords, interrupted bool) {
	st := s.e2bt
	if st == nil {
		return
	}
	st.records = r
	rows, err := r.E2BBuilds(context.Background(), e2bMaxBuilds)
	if err != nil {
		s.log.Warn("reading E2B template builds", "err", err)
		return
	}
	var cut []*e2bBuild
	st.mu.Lock()
	for _, data := range rows {
		var rec e2bBuildRec
		if err := json.Unmarshal(data, &rec); err != nil || rec.ID == "" {
			s.log.Warn("skipping an unreadable E2B template build record", "err", err)
			continue
		}
		b := rec.build()
		if interrupted && e2bInterrupt(b, time.Now()) {
			cut = append(cut, b)
		}
		st.builds[b.id] = b
		if b.status == "ready" { // rows are oldest first: the latest ready build wins
			st.meta[b.template] = e2bTmplRec{buildID: b.id, cpu: b.cpu, memory: b.memory, tags: b.tags, updated: b.created}
		}
	}
	st.mu.Unlock()
	for _, b := range cut {
		s.log.Warn("E2B template build cut off by a daemon restart", "template", b.template, "build", b.id, "step", b.step)
		s.e2bSaveBuild(b, true)
	}
}

// e2bRestartMessage is the error of a build the daemon's restart cut off.
const e2bRestartMessage = "the daemon restarted during the build"

// e2bInterrupt turns build b, read back after a restart, into an error when it was
// running (building): nothing runs it any more, and the SDK polling its status must not
// wait forever. Waiting builds (requested, steps not sent) stay: the SDK may still start
// them. Reports whether b changed. Pure.
func e2bInterrupt(b *e2bBuild, now time.Time) bool {
	if b.status != "building" {
		return false
	}
	msg := e2bRestartMessage
	if _, err := strconv.Atoi(b.step); err == nil {
		msg += fmt.Sprintf(" (at step %s)", b.step)
	}
	msg += "; its sandbox is gone: start the build again"
	entry := e2bLogEntry{Timestamp: now.UTC(), Level: "error", Message: msg, Step: b.step}
	b.status = "error"
	b.logs = append(b.logs, entry)
	b.reason = &e2bBuildReason{Message: msg, Step: b.step, LogEntries: []e2bLogEntry{entry}}
	return true
}

// e2bSaveBuild writes b's record when force, or when e2bSaveEvery passed since the last.
// Writes of one build are in order (its saveMu); a failed write is logged: the build goes
// on, its record is in memory.
func (s *Server) e2bSaveBuild(b *e2bBuild, force bool) {
	st := s.e2bt
	if st == nil || st.records == nil {
		return
	}
	b.saveMu.Lock()
	defer b.saveMu.Unlock()
	st.mu.Lock()
	now := time.Now()
	if !force && now.Sub(b.saved) < e2bSaveEvery {
		st.mu.Unlock()
		return
	}
	b.saved = now
	rec := b.recordLocked()
	st.mu.Unlock()
	data, err := json.Marshal(rec)
	if err == nil {
		err = st.records.PutE2BBuild(context.Background(), rec.ID, rec.Template, rec.Status, rec.Created, data)
	}
	if err != nil {
		s.log.Warn("storing an E2B template build", "build", rec.ID, "err", err)
	}
}
