package store

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// auditStore opens a store and appends n records (half lifecycle events, half AddAudit).
func auditStore(t *testing.T, n int) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "moat.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	for i := 1; i <= n; i++ {
		if i%2 == 0 {
			err = st.AddEvent(ctx, "sb1", "transition", fmt.Sprintf("event %d", i))
		} else {
			err = st.AddAudit(ctx, "sb1", "exec", fmt.Sprintf("exec %d", i))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return st, path
}

func verifyStore(t *testing.T, st *Store, pub ed25519.PublicKey) AuditReport {
	t.Helper()
	ctx := context.Background()
	recs, err := st.Audit(ctx, AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	cps, err := st.AuditCheckpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return VerifyAudit(recs, cps, pub)
}

func testKey(t *testing.T) ed25519.PrivateKey {
	_, k, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestAuditTamper: the test at the store level: one record edited, one removed,
// two swapped (by SQL on the database, as someone with the file would), each caught at the
// right sequence number; an intact chain passes; a forged checkpoint is caught.
func TestAuditTamper(t *testing.T) {
	key := testKey(t)
	pub := key.Public().(ed25519.PublicKey)
	for _, tc := range []struct {
		name   string
		sql    []string
		wantOK bool
		// rewrite: edit this record and store its recomputed hash (someone who knows the
		// encoding but cannot rewrite every later record and re-sign).
		rewrite int64
		want    []AuditProblem // Seq and Kind
	}{
		{name: "intact", wantOK: true},
		{name: "edited", sql: []string{`UPDATE audit SET detail = 'rm -rf nothing' WHERE seq = 5`},
			want: []AuditProblem{{Seq: 5, Kind: "edited"}}},
		{name: "edited actor", sql: []string{`UPDATE audit SET actor = 'operator' WHERE seq = 9`},
			want: []AuditProblem{{Seq: 9, Kind: "edited"}}},
		{name: "removed", sql: []string{`DELETE FROM audit WHERE seq = 4`},
			want: []AuditProblem{{Seq: 4, Kind: "missing"}}},
		{name: "removed two", sql: []string{`DELETE FROM audit WHERE seq IN (6, 7)`},
			want: []AuditProblem{{Seq: 6, Kind: "missing"}}},
		{name: "swapped", sql: []string{
			`UPDATE audit SET seq = -1 WHERE seq = 3`,
			`UPDATE audit SET seq = 3 WHERE seq = 4`,
			`UPDATE audit SET seq = 4 WHERE seq = -1`,
		}, want: []AuditProblem{{Seq: 3, Kind: "reordered"}, {Seq: 4, Kind: "reordered"}}},
		{name: "removed first", sql: []string{`DELETE FROM audit WHERE seq = 1`},
			want: []AuditProblem{{Seq: 2, Kind: "anchor"}}},
		{name: "removed last after checkpoint", sql: []string{`DELETE FROM audit WHERE seq = 10`},
			want: []AuditProblem{{Seq: 10, Kind: "missing"}}},
		{name: "hash replaced", sql: []string{`UPDATE audit SET hash = 'x' || hash WHERE seq = 6`},
			want: []AuditProblem{{Seq: 6, Kind: "edited"}}},
		{name: "rewritten with a recomputed hash", rewrite: 6,
			want: []AuditProblem{{Seq: 7, Kind: "chain"}}},
		{name: "forged checkpoint", sql: []string{`UPDATE audit_checkpoints SET hash = (SELECT hash FROM audit WHERE seq = 9) WHERE seq = 10`},
			want: []AuditProblem{{Seq: 10, Kind: "checkpoint"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := auditStore(t, 10)
			if _, ok, err := st.AuditCheckpoint(context.Background(), key); err != nil || !ok {
				t.Fatalf("checkpoint: %v %v", ok, err)
			}
			for _, q := range tc.sql {
				if _, err := st.db.Exec(q); err != nil {
					t.Fatal(q, err)
				}
			}
			if tc.rewrite > 0 {
				recs, _ := st.Audit(context.Background(), AuditFilter{After: tc.rewrite - 1, Limit: 1})
				r := recs[0]
				r.Detail = "forged"
				if _, err := st.db.Exec(`UPDATE audit SET detail = ?, hash = ? WHERE seq = ?`, r.Detail, AuditHash(r, r.Seq), r.Seq); err != nil {
					t.Fatal(err)
				}
			}
			rep := verifyStore(t, st, pub)
			if rep.OK != tc.wantOK {
				t.Fatalf("OK = %v, want %v: %+v", rep.OK, tc.wantOK, rep.Problems)
			}
			var got []AuditProblem
			for _, p := range rep.Problems {
				got = append(got, AuditProblem{Seq: p.Seq, Kind: p.Kind})
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("problems = %v, want %v (%+v)", got, tc.want, rep.Problems)
			}
		})
	}
}

// TestAuditWrongKey: checkpoints signed by another key fail.
func TestAuditWrongKey(t *testing.T) {
	st, _ := auditStore(t, 3)
	if _, _, err := st.AuditCheckpoint(context.Background(), testKey(t)); err != nil {
		t.Fatal(err)
	}
	other := testKey(t).Public().(ed25519.PublicKey)
	rep := verifyStore(t, st, other)
	if rep.OK || rep.Problems[0].Kind != "checkpoint" || rep.Problems[0].Seq != 3 {
		t.Fatalf("%+v", rep)
	}
}

// TestAuditRetention: pruning by count and by age leaves a chain that verifies (anchored
// by the signed checkpoint of the last removed record), appending after pruning continues
// it, and removing the anchor is caught.
func TestAuditRetention(t *testing.T) {
	key := testKey(t)
	pub := key.Public().(ed25519.PublicKey)
	ctx := context.Background()
	st, _ := auditStore(t, 20)
	n, err := st.PruneAudit(ctx, time.Time{}, 5, key)
	if err != nil || n != 15 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	if rep := verifyStore(t, st, pub); !rep.OK || rep.First != 16 || rep.Last != 20 {
		t.Fatalf("after prune: %+v", rep)
	}
	if err := st.AddAudit(ctx, "sb2", "exec", "after"); err != nil {
		t.Fatal(err)
	}
	if n, err := st.PruneAudit(ctx, time.Now().Add(time.Hour), 0, key); err != nil || n != 6 {
		t.Fatalf("pruned by age %d, %v", n, err)
	}
	// Empty log: the next record continues after the anchor.
	if err := st.AddAudit(ctx, "sb2", "exec", "after all"); err != nil {
		t.Fatal(err)
	}
	rep := verifyStore(t, st, pub)
	if !rep.OK || rep.First != 22 {
		t.Fatalf("after age prune: %+v", rep)
	}
	if _, err := st.db.Exec(`DELETE FROM audit_checkpoints`); err != nil {
		t.Fatal(err)
	}
	if rep := verifyStore(t, st, pub); rep.OK || rep.Problems[0].Kind != "anchor" || rep.Problems[0].Seq != 22 {
		t.Fatalf("without anchor: %+v", rep)
	}
}

// TestAuditLifecycleInTransaction: lifecycle writes (Insert/transition/Delete) are audit
// records too, with the caller as actor.
func TestAuditActor(t *testing.T) {
	st, _ := auditStore(t, 0)
	ctx := context.Background()
	if err := st.AddEvent(ctx, "sb", "approval", "x"); err != nil {
		t.Fatal(err)
	}
	recs, err := st.Audit(ctx, AuditFilter{Sandbox: "sb"})
	if err != nil || len(recs) != 1 || recs[0].Actor != "daemon" || recs[0].Kind != "approval" {
		t.Fatalf("%+v %v", recs, err)
	}
	if !strings.HasPrefix(recs[0].Prev, "0000") {
		t.Fatal(recs[0].Prev)
	}
}

// BenchmarkAuditAppend: the cost an exec's audit record adds — the same event insert
// without the chain (baseline), with the chain in the same transaction (AddEvent), and the
// audit record alone (AddAudit, what an exec writes) — each reporting its p50 in ms.
func BenchmarkAuditAppend(b *testing.B) {
	st, err := Open(filepath.Join(b.TempDir(), "moat.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	run := func(b *testing.B, write func() error) {
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if err := write(); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(t0))
		}
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	}
	b.Run("event-without-chain", func(b *testing.B) {
		run(b, func() error {
			tx, err := st.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO events(time, sandbox, kind, detail) VALUES(?,?,?,?)`,
				time.Now().UTC().Format(time.RFC3339Nano), "sb", "exec", `"/bin/bash" "-l" "-c" "echo hi"`); err != nil {
				return err
			}
			return tx.Commit()
		})
	})
	b.Run("event-with-chain", func(b *testing.B) {
		run(b, func() error { return st.AddEvent(ctx, "sb", "exec", `"/bin/bash" "-l" "-c" "echo hi"`) })
	})
	b.Run("audit-record", func(b *testing.B) {
		run(b, func() error { return st.AddAudit(ctx, "sb", "exec", `"/bin/bash" "-l" "-c" "echo hi"`) })
	})
}

// TestAuditKill9: a process appending records (events and audit records, from several
// goroutines) is killed with SIGKILL mid-write; the chain it leaves verifies.
func TestAuditKill9(t *testing.T) {
	if path := os.Getenv("MOAT_AUDIT_APPENDER"); path != "" {
		st, err := Open(path)
		if err != nil {
			os.Exit(2)
		}
		ctx := context.Background()
		for g := range 3 {
			go func() {
				for i := 0; ; i++ {
					if g == 0 {
						_ = st.AddEvent(ctx, "sb", "transition", strings.Repeat("x", i%500))
					} else {
						_ = st.AddAudit(ctx, "sb", "exec", strings.Repeat("y", i%700))
					}
				}
			}()
		}
		select {}
	}
	path := filepath.Join(t.TempDir(), "moat.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAuditKill9$")
		cmd.Env = append(os.Environ(), "MOAT_AUDIT_APPENDER="+path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill once it has written a few hundred records more.
		var start int64
		if recs, _ := st.Audit(context.Background(), AuditFilter{}); len(recs) > 0 {
			start = recs[len(recs)-1].Seq
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			recs, err := st.Audit(context.Background(), AuditFilter{After: start + 200, Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		rep := verifyStore(t, st, nil)
		if !rep.OK || rep.Records < 200*(round+1) {
			t.Fatalf("round %d after kill -9: %+v", round, rep)
		}
	}
}
