package egress

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/moatdev/moat/internal/egress/intercept"
	"github.com/moatdev/moat/internal/safegit"
)

// gitObjects is sandbox id's object check for the git gate (nil without Config.GitDir):
// its quarantines live in GitDir/<id>/<hash of the remote>, its push spool in
// GitDir/<id>/spool, all 0700 and the daemon's; Forget removes them.
func (m *Manager) gitObjects(b *boundary) *intercept.GitObjects {
	if m.cfg.GitDir == "" {
		return nil
	}
	id := b.id
	spool := filepath.Join(m.cfg.GitDir, id, "spool")
	if err := os.MkdirAll(spool, 0o700); err != nil {
		m.log.Warn("git gate: spool directory", "sandbox", id, "err", err)
	}
	var hold func(context.Context, intercept.HeldPush) error
	if b.gitHold {
		hold = func(_ context.Context, p intercept.HeldPush) error { return m.holdPush(id, p) }
	}
	return &intercept.GitObjects{
		Hold: hold,
		Reported: func(cid string, reports map[string]*safegit.ChangeReport, reportErr string) {
			m.setReports(id, cid, reports, reportErr)
		},
		SpoolDir:  spool,
		Protected: m.cfg.GitProtected,
		Quarantine: func(ctx context.Context, remote string) (*safegit.Quarantine, error) {
			return m.quarantine(ctx, id, remote)
		},
	}
}

// quarantine opens sandbox id's quarantine for remote, creating it on first use.
func (m *Manager) quarantine(ctx context.Context, id, remote string) (*safegit.Quarantine, error) {
	dir, err := safegit.Dir(m.cfg.GitDir, id, remote)
	if err != nil {
		return nil, err
	}
	opt := safegit.Options{Logger: m.log.With("sandbox", id)}
	m.gitMu.Lock()
	defer m.gitMu.Unlock()
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return nil, fmt.Errorf("quarantine of sandbox %s: %w", id, err)
		}
		return safegit.Create(ctx, dir, opt)
	}
	return safegit.Open(dir, opt)
}

// forgetGit removes sandbox id's quarantines and spool.
func (m *Manager) forgetGit(id string) {
	if m.cfg.GitDir == "" || id == "" || id == "." || id == ".." || filepath.Base(id) != id {
		return
	}
	if err := os.RemoveAll(filepath.Join(m.cfg.GitDir, id)); err != nil {
		m.log.Warn("removing the git quarantine of a deleted sandbox", "sandbox", id, "err", err)
	}
}
