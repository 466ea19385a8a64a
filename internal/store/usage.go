package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/usage"
)

// The usage ledger (issue 16, metering). usage_sandboxes holds one row per sandbox ever
// created, kept after it is deleted: who created it (owner, the API key), and the mark of
// what the ledger last saw (usage.Mark: state since when, the CPU counter of the current
// cgroup, the gauges). usage_hours holds the hourly sums of what each reading added.
// State changes are charged in the transaction that records them (Insert, Update,
// Delete), so wall time by state is exact; CPU and memory come from the daemon's sampler
// (RecordUsage). usage_api counts API calls by key and hour.
const usageSchema = `
CREATE TABLE IF NOT EXISTS usage_sandboxes (
	id         TEXT PRIMARY KEY,
	owner      TEXT NOT NULL,
	template   TEXT NOT NULL,
	runtime    TEXT NOT NULL,
	warm       INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	deleted_at INTEGER NOT NULL DEFAULT 0,
	state      TEXT NOT NULL,
	at         INTEGER NOT NULL,
	cpu_ns     INTEGER NOT NULL DEFAULT 0,
	mem_bytes  INTEGER NOT NULL DEFAULT 0,
	drive_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS usage_hours (
	sandbox    TEXT NOT NULL,
	hour       INTEGER NOT NULL,
	running_ns INTEGER NOT NULL DEFAULT 0,
	paused_ns  INTEGER NOT NULL DEFAULT 0,
	stopped_ns INTEGER NOT NULL DEFAULT 0,
	cpu_ns     INTEGER NOT NULL DEFAULT 0,
	mem_gibh   REAL NOT NULL DEFAULT 0,
	drive_gibh REAL NOT NULL DEFAULT 0,
	snap_gibh  REAL NOT NULL DEFAULT 0,
	PRIMARY KEY (sandbox, hour)
);
CREATE TABLE IF NOT EXISTS usage_snapshots (
	id      TEXT PRIMARY KEY,
	sandbox TEXT NOT NULL,
	at      INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS usage_api (
	key   TEXT NOT NULL,
	hour  INTEGER NOT NULL,
	calls INTEGER NOT NULL,
	PRIMARY KEY (key, hour)
);
`

var _ sandbox.UsageLedger = (*Store)(nil)

// usageInsert starts the ledger row of a new sandbox (in Insert's transaction).
func usageInsert(ctx context.Context, tx *sql.Tx, sb *sandbox.Sandbox, now time.Time) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO usage_sandboxes(id, owner, template, runtime, warm, created_at, state, at, drive_bytes)
		VALUES(?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO NOTHING`,
		sb.ID, sb.Owner, sb.Template, sb.Runtime, sb.Warm, now.UnixNano(), string(sb.State), now.UnixNano(), sb.Limits.DiskBytes)
	if err != nil {
		return fmt.Errorf("starting the usage ledger of %s: %w", sb.ID, err)
	}
	return nil
}

// getMark reads sandbox id's ledger mark; ok is false when it has none (a sandbox made
// before metering).
func getMark(ctx context.Context, q querier, id string) (m usage.Mark, deleted bool, ok bool, err error) {
	var at, cpu, mem, drive, del int64
	err = q.QueryRowContext(ctx, `SELECT state, at, cpu_ns, mem_bytes, drive_bytes, deleted_at FROM usage_sandboxes WHERE id = ?`, id).
		Scan(&m.State, &at, &cpu, &mem, &drive, &del)
	if errors.Is(err, sql.ErrNoRows) {
		return m, false, false, nil
	}
	if err != nil {
		return m, false, false, fmt.Errorf("reading the usage ledger of %s: %w", id, err)
	}
	m.At, m.CPUNs, m.MemBytes, m.DriveBytes = time.Unix(0, at), uint64(cpu), mem, drive
	return m, del != 0, true, nil
}

// accrue applies reading r to sandbox id's mark and buckets in tx.
func accrue(ctx context.Context, tx *sql.Tx, id string, r usage.Reading) error {
	prev, deleted, ok, err := getMark(ctx, tx, id)
	if err != nil || !ok || deleted {
		return err
	}
	deltas, next := usage.Accrue(prev, r)
	if err := addHours(ctx, tx, id, deltas); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE usage_sandboxes SET state = ?, at = ?, cpu_ns = ?, mem_bytes = ?, drive_bytes = ? WHERE id = ?`,
		next.State, next.At.UnixNano(), int64(next.CPUNs), next.MemBytes, next.DriveBytes, id); err != nil {
		return fmt.Errorf("recording usage of %s: %w", id, err)
	}
	return nil
}

// addHours adds deltas to sandbox id's hourly sums.
func addHours(ctx context.Context, tx *sql.Tx, id string, deltas []usage.Delta) error {
	for _, d := range deltas {
		if _, err := tx.ExecContext(ctx, `INSERT INTO usage_hours(sandbox, hour, running_ns, paused_ns, stopped_ns, cpu_ns, mem_gibh, drive_gibh, snap_gibh)
			VALUES(?,?,?,?,?,?,?,?,?) ON CONFLICT(sandbox, hour) DO UPDATE SET
			running_ns = running_ns + excluded.running_ns, paused_ns = paused_ns + excluded.paused_ns,
			stopped_ns = stopped_ns + excluded.stopped_ns, cpu_ns = cpu_ns + excluded.cpu_ns,
			mem_gibh = mem_gibh + excluded.mem_gibh, drive_gibh = drive_gibh + excluded.drive_gibh,
			snap_gibh = snap_gibh + excluded.snap_gibh`,
			id, d.Hour.Unix(), d.RunningNs, d.PausedNs, d.StoppedNs, int64(d.CPUNs), d.MemGiBHours, d.DriveGiBHours, d.SnapshotGiBHours); err != nil {
			return fmt.Errorf("recording usage of %s: %w", id, err)
		}
	}
	return nil
}

// RecordSnapshots charges each snapshot's drive size, from when it was last charged (or
// made) until at, to the sandbox it was taken of (sandbox.UsageLedger). The sampler calls
// it with the snapshots that exist: a deleted one stops being charged at the sample
// before its deletion.
func (s *Store) RecordSnapshots(ctx context.Context, snaps []sandbox.SnapshotUsage, at time.Time) error {
	if len(snaps) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("recording snapshot usage: %w", err)
	}
	defer tx.Rollback()
	for _, sn := range snaps {
		from := sn.CreatedAt
		var last int64
		err := tx.QueryRowContext(ctx, `SELECT at FROM usage_snapshots WHERE id = ?`, sn.ID).Scan(&last)
		switch {
		case err == nil:
			from = time.Unix(0, last)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("recording snapshot usage: %w", err)
		}
		if !at.After(from) {
			continue
		}
		if err := addHours(ctx, tx, sn.Sandbox, usage.Stored(from, at, sn.SizeBytes)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO usage_snapshots(id, sandbox, at) VALUES(?,?,?)
			ON CONFLICT(id) DO UPDATE SET at = excluded.at`, sn.ID, sn.Sandbox, at.UnixNano()); err != nil {
			return fmt.Errorf("recording snapshot usage: %w", err)
		}
	}
	return tx.Commit()
}

// usageUpdate follows an Update of sb (in its transaction): the owner and warm flag
// (a warm sandbox handed to a key becomes that key's), and a state change charged at once.
func usageUpdate(ctx context.Context, tx *sql.Tx, sb *sandbox.Sandbox, before sandbox.State, now time.Time) error {
	if _, err := tx.ExecContext(ctx, `UPDATE usage_sandboxes SET owner = ?, warm = ?, template = ?, runtime = ? WHERE id = ?`,
		sb.Owner, sb.Warm, sb.Template, sb.Runtime, sb.ID); err != nil {
		return fmt.Errorf("recording usage of %s: %w", sb.ID, err)
	}
	if sb.State == before {
		return nil
	}
	return accrue(ctx, tx, sb.ID, usage.Reading{At: now, State: string(sb.State), DriveBytes: sb.Limits.DiskBytes})
}

// usageDelete closes sandbox id's ledger row (in Delete's transaction); the row and its
// buckets stay.
func usageDelete(ctx context.Context, tx *sql.Tx, id string, now time.Time) error {
	if err := accrue(ctx, tx, id, usage.Reading{At: now, State: "deleted"}); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE usage_sandboxes SET deleted_at = ? WHERE id = ? AND deleted_at = 0`, now.UnixNano(), id)
	return err
}

// RecordUsage applies one sample of sandbox id (sandbox.UsageLedger): the sampler read
// the cgroup while the sandbox was in r.State. A sample of a state the ledger no longer
// has (the sandbox stopped meanwhile) charges time only: its counters belong to a cgroup
// that the final sample at the stop has already accounted.
func (s *Store) RecordUsage(ctx context.Context, id string, r usage.Reading) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("recording usage of %s: %w", id, err)
	}
	defer tx.Rollback()
	prev, _, ok, err := getMark(ctx, tx, id)
	if err != nil || !ok {
		return err
	}
	if prev.State != r.State {
		r.CPUNs, r.MemBytes, r.State = nil, nil, ""
	}
	if err := accrue(ctx, tx, id, r); err != nil {
		return err
	}
	return tx.Commit()
}

// AddAPICalls adds counts of API calls by key id to the hour of at.
func (s *Store) AddAPICalls(ctx context.Context, calls map[string]int64, at time.Time) error {
	if len(calls) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("recording API calls: %w", err)
	}
	defer tx.Rollback()
	hour := at.UTC().Truncate(time.Hour).Unix()
	for k, n := range calls {
		if _, err := tx.ExecContext(ctx, `INSERT INTO usage_api(key, hour, calls) VALUES(?,?,?)
			ON CONFLICT(key, hour) DO UPDATE SET calls = calls + excluded.calls`, k, hour, n); err != nil {
			return fmt.Errorf("recording API calls: %w", err)
		}
	}
	return tx.Commit()
}

// UsageQuery selects a usage report: the hours from Since (zero: the beginning) up to
// Until (zero: now); Owner, when not nil, keeps the sandboxes and calls of one API key.
type UsageQuery struct {
	Since, Until time.Time
	Owner        *string
}

// Usage returns one row per sandbox that existed in the window (warm pool sandboxes not
// yet handed out are the platform's and left out) and the API calls by key. The window
// is exact to the hour (buckets are hourly); the time since a sandbox's last reading is
// charged at its last state and gauges up to now, so running time counts without waiting
// for the sampler.
func (s *Store) Usage(ctx context.Context, q UsageQuery, now time.Time) ([]v1.UsageRow, map[string]int64, error) {
	until := q.Until
	if until.IsZero() || until.After(now) {
		until = now
	}
	lo := int64(0)
	if !q.Since.IsZero() {
		lo = q.Since.UTC().Truncate(time.Hour).Unix()
	}
	hi := until.Unix() // buckets starting before until
	rows, err := s.db.QueryContext(ctx, `SELECT id, owner, template, runtime, created_at, deleted_at, state, at, cpu_ns, mem_bytes, drive_bytes
		FROM usage_sandboxes WHERE warm = 0`)
	if err != nil {
		return nil, nil, fmt.Errorf("reading usage: %w", err)
	}
	type sbRow struct {
		row  v1.UsageRow
		mark usage.Mark
		del  int64
	}
	var list []*sbRow
	byID := map[string]*sbRow{}
	for rows.Next() {
		var r sbRow
		var created, at, cpu int64
		if err := rows.Scan(&r.row.Key, &r.row.APIKey, &r.row.Template, &r.row.Runtime, &created, &r.del, &r.mark.State, &at, &cpu, &r.mark.MemBytes, &r.mark.DriveBytes); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("reading usage: %w", err)
		}
		if q.Owner != nil && r.row.APIKey != *q.Owner {
			continue
		}
		r.mark.At, r.mark.CPUNs = time.Unix(0, at), uint64(cpu)
		c := time.Unix(0, created).UTC()
		if c.After(until) || (r.del != 0 && !q.Since.IsZero() && time.Unix(0, r.del).Before(q.Since)) {
			continue // did not exist in the window
		}
		r.row.Sandbox, r.row.CreatedAt, r.row.Sandboxes = r.row.Key, &c, 1
		if r.del != 0 {
			d := time.Unix(0, r.del).UTC()
			r.row.DeletedAt = &d
		}
		if !c.Before(q.Since) {
			r.row.Creations = 1
		}
		list = append(list, &r)
		byID[r.row.Key] = &r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	add := func(r *v1.UsageRow, d usage.Delta) {
		r.RunningSeconds += float64(d.RunningNs) / 1e9
		r.PausedSeconds += float64(d.PausedNs) / 1e9
		r.StoppedSeconds += float64(d.StoppedNs) / 1e9
		r.CPUSeconds += float64(d.CPUNs) / 1e9
		r.MemoryGiBHours += d.MemGiBHours
		r.DriveGiBHours += d.DriveGiBHours
		r.SnapshotGiBHours += d.SnapshotGiBHours
	}
	hrows, err := s.db.QueryContext(ctx, `SELECT sandbox, running_ns, paused_ns, stopped_ns, cpu_ns, mem_gibh, drive_gibh, snap_gibh
		FROM usage_hours WHERE hour >= ? AND hour < ?`, lo, hi)
	if err != nil {
		return nil, nil, fmt.Errorf("reading usage: %w", err)
	}
	for hrows.Next() {
		var id string
		var d usage.Delta
		var cpu int64
		if err := hrows.Scan(&id, &d.RunningNs, &d.PausedNs, &d.StoppedNs, &cpu, &d.MemGiBHours, &d.DriveGiBHours, &d.SnapshotGiBHours); err != nil {
			hrows.Close()
			return nil, nil, fmt.Errorf("reading usage: %w", err)
		}
		d.CPUNs = uint64(cpu)
		if r := byID[id]; r != nil {
			add(&r.row, d)
		}
	}
	hrows.Close()
	if err := hrows.Err(); err != nil {
		return nil, nil, err
	}
	// The open interval since each live row's last reading, up to now.
	for _, r := range list {
		if r.del != 0 {
			continue
		}
		deltas, _ := usage.Accrue(r.mark, usage.Reading{At: now})
		for _, d := range deltas {
			if h := d.Hour.Unix(); h >= lo && h < hi {
				add(&r.row, d)
			}
		}
	}
	// Egress bytes by destination, from the egress journal.
	sinceS := "0"
	if !q.Since.IsZero() {
		sinceS = q.Since.UTC().Format(time.RFC3339Nano)
	}
	erows, err := s.db.QueryContext(ctx, `SELECT sandbox, CASE WHEN name != '' THEN name ELSE addr END, SUM(up + down)
		FROM egress WHERE time >= ? AND time < ? AND (up + down) > 0 GROUP BY 1, 2`, sinceS, until.UTC().Format(time.RFC3339Nano))
	if err != nil {
		return nil, nil, fmt.Errorf("reading usage: %w", err)
	}
	for erows.Next() {
		var id, dest string
		var n int64
		if err := erows.Scan(&id, &dest, &n); err != nil {
			erows.Close()
			return nil, nil, fmt.Errorf("reading usage: %w", err)
		}
		if r := byID[id]; r != nil {
			if r.row.EgressBytes == nil {
				r.row.EgressBytes = map[string]int64{}
			}
			r.row.EgressBytes[dest] += n
			r.row.EgressBytesTotal += n
		}
	}
	erows.Close()
	if err := erows.Err(); err != nil {
		return nil, nil, err
	}
	calls := map[string]int64{}
	crows, err := s.db.QueryContext(ctx, `SELECT key, SUM(calls) FROM usage_api WHERE hour >= ? AND hour < ? GROUP BY key`, lo, hi)
	if err != nil {
		return nil, nil, fmt.Errorf("reading usage: %w", err)
	}
	for crows.Next() {
		var k string
		var n int64
		if err := crows.Scan(&k, &n); err != nil {
			crows.Close()
			return nil, nil, err
		}
		if q.Owner == nil || *q.Owner == k {
			calls[k] = n
		}
	}
	crows.Close()
	out := make([]v1.UsageRow, 0, len(list))
	for _, r := range list {
		out = append(out, r.row)
	}
	return out, calls, crows.Err()
}
