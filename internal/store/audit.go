package store

// The audit log (issue 16): one append-only, hash-chained table of security-relevant
// events. Every lifecycle event (addEvent) is also an audit record, written in the same
// transaction, so nothing is recorded twice by hand and a crash leaves either both or
// neither; events that are not a sandbox's lifecycle (exec, file writes, API-key use) are
// appended with AddAudit. Each record carries the SHA-256 of the previous one over a
// canonical encoding (AuditHash); signed checkpoints (audit_checkpoints, signed by the
// daemon's key: internal/daemon/audit.go) anchor the chain, including the first record
// kept after retention removed older ones. VerifyAudit is the pure check.

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/moatdev/moat/internal/sandbox"
)

const auditSchema = `
CREATE TABLE IF NOT EXISTS audit (
	seq     INTEGER PRIMARY KEY,
	time    TEXT NOT NULL,
	sandbox TEXT NOT NULL,
	actor   TEXT NOT NULL,
	kind    TEXT NOT NULL,
	detail  TEXT NOT NULL,
	prev    TEXT NOT NULL,
	hash    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_sandbox ON audit(sandbox, seq);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
	seq  INTEGER PRIMARY KEY,
	hash TEXT NOT NULL,
	time TEXT NOT NULL,
	sig  TEXT NOT NULL
);
`

// AuditGenesis is the prev of the first record ever written.
const AuditGenesis = "0000000000000000000000000000000000000000000000000000000000000000"

// AuditRecord is one record of the audit log.
type AuditRecord struct {
	Seq     int64  `json:"seq"`
	Time    string `json:"time"` // RFC 3339, UTC, as stored (hashed as is)
	Sandbox string `json:"sandbox,omitempty"`
	Actor   string `json:"actor"` // "operator", "key:<id>" or "daemon"
	Kind    string `json:"kind"`
	Detail  string `json:"detail,omitempty"`
	Prev    string `json:"prev"`
	Hash    string `json:"hash"`
}

// AuditCheckpoint is a signed statement that the record Seq has hash Hash.
type AuditCheckpoint struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
	Time string `json:"time"`
	Sig  string `json:"sig"` // hex ed25519 signature of CheckpointMessage
}

// auditCanon is the canonical encoding hashed: a fixed field order (encoding/json writes
// struct fields in declaration order, strings escaped one way).
type auditCanon struct {
	Seq     int64  `json:"seq"`
	Time    string `json:"time"`
	Sandbox string `json:"sandbox"`
	Actor   string `json:"actor"`
	Kind    string `json:"kind"`
	Detail  string `json:"detail"`
	Prev    string `json:"prev"`
}

// AuditHash is the hash of r at sequence number seq: SHA-256 over the canonical JSON of
// its fields and its prev (hex).
func AuditHash(r AuditRecord, seq int64) string {
	b, _ := json.Marshal(auditCanon{seq, r.Time, r.Sandbox, r.Actor, r.Kind, r.Detail, r.Prev})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CheckpointMessage is what a checkpoint's signature covers.
func CheckpointMessage(c AuditCheckpoint) []byte {
	return []byte("moat-audit-checkpoint\n" + strconv.FormatInt(c.Seq, 10) + "\n" + c.Hash + "\n" + c.Time + "\n")
}

// ActorOf names the caller in ctx for the audit log.
func ActorOf(ctx context.Context) string {
	c := sandbox.CallerFrom(ctx)
	switch {
	case c.APIKey != "":
		return "key:" + c.APIKey
	case c.Operator:
		return "operator"
	}
	return "daemon"
}

// appendAudit appends one record inside tx (an immediate transaction: writers are
// serialized, across processes too, so the chain has no fork).
func appendAudit(ctx context.Context, tx *sql.Tx, sandboxID, kind, detail string) error {
	var seq int64
	prev := AuditGenesis
	err := tx.QueryRowContext(ctx, `SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`).Scan(&seq, &prev)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("reading the audit chain's head: %w", err)
	}
	if errors.Is(err, sql.ErrNoRows) {
		// Empty table: retention may have removed every record; continue after the newest
		// checkpoint so the chain stays anchored.
		var c AuditCheckpoint
		if err := tx.QueryRowContext(ctx, `SELECT seq, hash FROM audit_checkpoints ORDER BY seq DESC LIMIT 1`).Scan(&c.Seq, &c.Hash); err == nil {
			seq, prev = c.Seq, c.Hash
		}
	}
	r := AuditRecord{Seq: seq + 1, Time: time.Now().UTC().Format(time.RFC3339Nano), Sandbox: sandboxID,
		Actor: ActorOf(ctx), Kind: kind, Detail: detail, Prev: prev}
	r.Hash = AuditHash(r, r.Seq)
	if _, err := tx.ExecContext(ctx, `INSERT INTO audit(seq, time, sandbox, actor, kind, detail, prev, hash) VALUES(?,?,?,?,?,?,?,?)`,
		r.Seq, r.Time, r.Sandbox, r.Actor, r.Kind, r.Detail, r.Prev, r.Hash); err != nil {
		return fmt.Errorf("appending to the audit log: %w", err)
	}
	return nil
}

// AddAudit appends an audit record that is not a lifecycle event (exec, file write, API
// key use).
func (s *Store) AddAudit(ctx context.Context, sandboxID, kind, detail string) (err error) {
	defer func() { err = classifyFull(err) }()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := appendAudit(ctx, tx, sandboxID, kind, detail); err != nil {
		return err
	}
	return tx.Commit()
}

// AuditFilter selects records: of one sandbox (""), from a time, after a sequence number,
// at most Limit (0: all).
type AuditFilter struct {
	Sandbox string
	Since   time.Time
	After   int64
	Limit   int
}

// Audit returns the records matching f, oldest first.
func (s *Store) Audit(ctx context.Context, f AuditFilter) ([]AuditRecord, error) {
	q := `SELECT seq, time, sandbox, actor, kind, detail, prev, hash FROM audit WHERE seq > ?`
	args := []any{f.After}
	if f.Sandbox != "" {
		q += ` AND sandbox = ?`
		args = append(args, f.Sandbox)
	}
	if !f.Since.IsZero() {
		q += ` AND time >= ?`
		args = append(args, f.Since.UTC().Format(time.RFC3339Nano))
	}
	q += ` ORDER BY seq`
	if f.Limit > 0 {
		q += ` LIMIT ` + strconv.Itoa(f.Limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	defer rows.Close()
	var out []AuditRecord
	for rows.Next() {
		var r AuditRecord
		if err := rows.Scan(&r.Seq, &r.Time, &r.Sandbox, &r.Actor, &r.Kind, &r.Detail, &r.Prev, &r.Hash); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// AuditCheckpoints returns every checkpoint, oldest first.
func (s *Store) AuditCheckpoints(ctx context.Context) ([]AuditCheckpoint, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, hash, time, sig FROM audit_checkpoints ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AuditCheckpoint
	for rows.Next() {
		var c AuditCheckpoint
		if err := rows.Scan(&c.Seq, &c.Hash, &c.Time, &c.Sig); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// AuditCheckpoint signs the chain's head with key (when it moved since the last
// checkpoint) and returns the checkpoint (ok false: nothing new to sign).
func (s *Store) AuditCheckpoint(ctx context.Context, key ed25519.PrivateKey) (AuditCheckpoint, bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return AuditCheckpoint{}, false, err
	}
	defer tx.Rollback()
	var c AuditCheckpoint
	if err := tx.QueryRowContext(ctx, `SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`).Scan(&c.Seq, &c.Hash); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return AuditCheckpoint{}, false, nil
		}
		return AuditCheckpoint{}, false, err
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM audit_checkpoints WHERE seq = ?`, c.Seq).Scan(&n); err != nil {
		return AuditCheckpoint{}, false, err
	}
	if n > 0 {
		return AuditCheckpoint{}, false, nil
	}
	c.Time = time.Now().UTC().Format(time.RFC3339Nano)
	c.Sig = hex.EncodeToString(ed25519.Sign(key, CheckpointMessage(c)))
	if _, err := tx.ExecContext(ctx, `INSERT INTO audit_checkpoints(seq, hash, time, sig) VALUES(?,?,?,?)`, c.Seq, c.Hash, c.Time, c.Sig); err != nil {
		return AuditCheckpoint{}, false, err
	}
	return c, true, tx.Commit()
}

// PruneAudit removes the records older than before, or the oldest beyond maxRecords
// (> 0), keeping the chain verifiable: the record just before the first kept one is
// signed as a checkpoint (with key) in the same transaction, so the first kept record's
// prev is anchored. It returns how many records it removed.
func (s *Store) PruneAudit(ctx context.Context, before time.Time, maxRecords int64, key ed25519.PrivateKey) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var cut int64 // remove seq ≤ cut
	if !before.IsZero() {
		var c sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(seq) FROM audit WHERE time < ?`, before.UTC().Format(time.RFC3339Nano)).Scan(&c); err != nil {
			return 0, err
		}
		cut = max(cut, c.Int64)
	}
	if maxRecords > 0 {
		var hi sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(seq) FROM audit`).Scan(&hi); err != nil {
			return 0, err
		}
		cut = max(cut, hi.Int64-maxRecords)
	}
	if cut <= 0 {
		return 0, nil
	}
	c := AuditCheckpoint{Seq: cut}
	if err := tx.QueryRowContext(ctx, `SELECT hash FROM audit WHERE seq = ?`, cut).Scan(&c.Hash); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil // already removed
		}
		return 0, err
	}
	c.Time = time.Now().UTC().Format(time.RFC3339Nano)
	c.Sig = hex.EncodeToString(ed25519.Sign(key, CheckpointMessage(c)))
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO audit_checkpoints(seq, hash, time, sig) VALUES(?,?,?,?)`, c.Seq, c.Hash, c.Time, c.Sig); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM audit WHERE seq <= ?`, cut)
	if err != nil {
		return 0, err
	}
	// Checkpoints of removed records are no longer needed, but the anchor stays.
	if _, err := tx.ExecContext(ctx, `DELETE FROM audit_checkpoints WHERE seq < ?`, cut); err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, tx.Commit()
}

// AuditProblem is one failure of verification, at record Seq.
type AuditProblem struct {
	Seq int64 `json:"seq"`
	// Kind: "edited" (the record does not match its hash), "reordered" (it is another
	// position's record), "missing" (records absent before Seq), "chain" (its prev is not
	// the previous record's hash), "checkpoint" (a bad signature, or a checkpoint that
	// names a hash the chain does not have), "anchor" (the first record is not anchored).
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// AuditReport is the result of VerifyAudit.
type AuditReport struct {
	OK          bool           `json:"ok"`
	Records     int            `json:"records"`
	First       int64          `json:"first,omitempty"`
	Last        int64          `json:"last,omitempty"`
	Checkpoints int            `json:"checkpoints"`
	Problems    []AuditProblem `json:"problems,omitempty"`
}

// VerifyAudit checks records (the whole table, in seq order) and checkpoints against pub.
// The first record must be the genesis (seq 1, prev AuditGenesis) or anchored by a signed
// checkpoint of the record before it (retention). Pure: no I/O.
func VerifyAudit(records []AuditRecord, checkpoints []AuditCheckpoint, pub ed25519.PublicKey) AuditReport {
	rep := AuditReport{Records: len(records), Checkpoints: len(checkpoints)}
	add := func(seq int64, kind, format string, a ...any) {
		rep.Problems = append(rep.Problems, AuditProblem{Seq: seq, Kind: kind, Message: fmt.Sprintf(format, a...)})
	}
	signed := map[int64]string{}
	for _, c := range checkpoints {
		sig, err := hex.DecodeString(c.Sig)
		if err != nil || len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, CheckpointMessage(c), sig) {
			add(c.Seq, "checkpoint", "checkpoint at record %d: bad signature (not made by this daemon's key, or altered)", c.Seq)
			continue
		}
		signed[c.Seq] = c.Hash
	}
	byHash := map[string]int64{}
	for _, r := range records {
		byHash[r.Hash] = r.Seq
	}
	var prevSeq int64
	prevHash, prevBad := "", false
	for i, r := range records {
		before := len(rep.Problems)
		if i == 0 {
			rep.First = r.Seq
			switch h, ok := signed[r.Seq-1]; {
			case r.Seq == 1 && r.Prev == AuditGenesis:
			case ok && h == r.Prev:
			case ok:
				add(r.Seq, "chain", "record %d: its prev does not match the signed checkpoint of record %d", r.Seq, r.Seq-1)
			default:
				add(r.Seq, "anchor", "record %d is the first but neither the genesis nor anchored by a signed checkpoint of record %d: records before it were removed", r.Seq, r.Seq-1)
			}
		} else {
			if r.Seq != prevSeq+1 {
				if r.Seq <= prevSeq {
					add(r.Seq, "reordered", "record %d follows record %d", r.Seq, prevSeq)
				} else if r.Seq == prevSeq+2 {
					add(prevSeq+1, "missing", "record %d is missing (between %d and %d)", prevSeq+1, prevSeq, r.Seq)
				} else {
					add(prevSeq+1, "missing", "records %d to %d are missing", prevSeq+1, r.Seq-1)
				}
			}
		}
		own := AuditHash(r, r.Seq)
		switch {
		case own != r.Hash:
			// Another position's record moved here? Its content hashes right at that seq.
			moved := int64(0)
			for _, d := range []int64{-1, 1, -2, 2, -3, 3} {
				if AuditHash(r, r.Seq+d) == r.Hash {
					moved = r.Seq + d
					break
				}
			}
			if moved != 0 {
				add(r.Seq, "reordered", "record %d holds record %d (records reordered)", r.Seq, moved)
			} else {
				add(r.Seq, "edited", "record %d does not match its hash: it was edited", r.Seq)
			}
		case i > 0 && r.Prev != prevHash && r.Seq == prevSeq+1 && !prevBad:
			if from, ok := byHash[r.Prev]; ok && from != prevSeq {
				add(r.Seq, "reordered", "record %d follows record %d but chains to record %d", r.Seq, prevSeq, from)
			} else {
				add(r.Seq, "chain", "record %d does not chain to record %d (its prev is not that record's hash)", r.Seq, prevSeq)
			}
		case i > 0 && r.Prev != prevHash:
			// A gap, already reported; say whether the chain is broken too (it always is).
		}
		if h, ok := signed[r.Seq]; ok && h != r.Hash {
			add(r.Seq, "checkpoint", "record %d does not match the signed checkpoint of its hash", r.Seq)
		}
		prevSeq, prevHash, prevBad = r.Seq, r.Hash, len(rep.Problems) > before
		rep.Last = r.Seq
	}
	for seq := range signed {
		if len(records) > 0 && seq > rep.Last {
			add(seq, "missing", "a signed checkpoint names record %d but the log ends at %d: records were removed from its end", seq, rep.Last)
		}
	}
	sortProblems(rep.Problems)
	rep.OK = len(rep.Problems) == 0
	return rep
}

func sortProblems(p []AuditProblem) {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && p[j].Seq < p[j-1].Seq; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}
