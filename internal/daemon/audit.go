package daemon

// The audit log's daemon side (issue 16): the checkpoint signing key (an ed25519 seed in
// <data>/audit.key, mode 0600), periodic signed checkpoints of the chain's head, retention
// by age (--audit-keep) and size (--audit-max), and the adapter the API serves. The chain
// itself is written by the store in the same transaction as each event (store/audit.go).

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/store"
)

// auditKeyFile is the checkpoint signing key's file in the data directory.
const auditKeyFile = "audit.key"

// loadAuditKey reads the signing key of dir, making one (0600) when there is none.
func loadAuditKey(dir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dir, auditKeyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		seed := make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(hex.EncodeToString(seed)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("writing the audit key: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return nil, fmt.Errorf("writing the audit key: %w", err)
		}
		return ed25519.NewKeyFromSeed(seed), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the audit key: %w", err)
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("audit key %s: not a hex ed25519 seed", path)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// auditLog serves the audit log to the API and keeps it: checkpoints and retention.
type auditLog struct {
	st   *store.Store
	key  ed25519.PrivateKey
	keep time.Duration // remove records older (0: keep by age for ever)
	max  int64         // keep at most this many records (0: no limit)
	log  *slog.Logger
}

func (a *auditLog) Audit(ctx context.Context, sandbox string, since time.Time, after int64, limit int) ([]v1.AuditRecord, error) {
	recs, err := a.st.Audit(ctx, store.AuditFilter{Sandbox: sandbox, Since: since, After: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]v1.AuditRecord, len(recs))
	for i, r := range recs {
		out[i] = v1.AuditRecord(r)
	}
	return out, nil
}

func (a *auditLog) VerifyAudit(ctx context.Context) (v1.AuditVerification, error) {
	recs, err := a.st.Audit(ctx, store.AuditFilter{})
	if err != nil {
		return v1.AuditVerification{}, err
	}
	cps, err := a.st.AuditCheckpoints(ctx)
	if err != nil {
		return v1.AuditVerification{}, err
	}
	pub := a.key.Public().(ed25519.PublicKey)
	rep := store.VerifyAudit(recs, cps, pub)
	v := v1.AuditVerification{OK: rep.OK, Records: rep.Records, First: rep.First, Last: rep.Last,
		Checkpoints: rep.Checkpoints, PublicKey: hex.EncodeToString(pub)}
	for _, p := range rep.Problems {
		v.Problems = append(v.Problems, v1.AuditProblem(p))
	}
	return v, nil
}

func (a *auditLog) Record(ctx context.Context, sandbox, kind, detail string) {
	if err := a.st.AddAudit(context.WithoutCancel(ctx), sandbox, kind, detail); err != nil {
		a.log.Error("recording an audit record", "sandbox", sandbox, "kind", kind, "err", err)
	}
}

// tick signs the chain's head and applies retention (from the daemon's sweep).
func (a *auditLog) tick(ctx context.Context, now time.Time) {
	if a.keep > 0 || a.max > 0 {
		var before time.Time
		if a.keep > 0 {
			before = now.Add(-a.keep)
		}
		if n, err := a.st.PruneAudit(ctx, before, a.max, a.key); err != nil {
			a.log.Error("audit retention", "err", err)
		} else if n > 0 {
			a.log.Info("audit records removed by retention", "records", n)
		}
	}
	if _, _, err := a.st.AuditCheckpoint(ctx, a.key); err != nil {
		a.log.Error("audit checkpoint", "err", err)
	}
}
