package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/testutil"
)

// TestAuditLog drives a real daemon (runc and runsc): lifecycle, exec, a file write, a
// phase change and a credential injected by the proxy are audit records with their actor;
// a canary secret used through a credential binding appears nowhere in the audit output
// (list, export) nor in the database files; moat audit --follow prints new records; the
// daemon signs checkpoints; then, through the real CLI on this daemon's database, an
// edited, a removed and two swapped records are each caught at their sequence number, and
// retention keeps verify passing.
func TestAuditLog(t *testing.T) {
	const canary = "canary-secret-7d41e09b2c6a"
	in := newInternet(t)
	up := testutil.NewUpstreamCA(t, "api.test")
	caFile := upstreamCAFile(t, up)
	port := tlsServe(t, up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.log.add("cred path=%s auth=%s", r.URL.Path, r.Header.Get("Authorization"))
		fmt.Fprintf(w, "you sent %s\n", r.Header.Get("Authorization"))
	}))
	var daemonLog testutil.SyncBuffer
	e := newEnvWith(t, func(c *daemon.Config) {
		in.configure(c)
		extra, _ := egress.ParseHosts([]byte("127.0.0.4 api.test\n"))
		for k, v := range extra {
			c.EgressHosts[k] = v
		}
		c.EgressCA = caFile
		c.SweepInterval = time.Second // checkpoints each sweep
		c.Log = slog.New(slog.NewTextHandler(&daemonLog, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	ctx := context.Background()
	if err := e.c.SetSecret(ctx, "API_TOKEN", canary, &v1.SecretScope{Hosts: []string{fmt.Sprintf("api.test:%d", port)}}); err != nil {
		t.Fatal(err)
	}
	moat := filepath.Join(testutil.Binaries(t), "moat")
	sock := filepath.Join(e.runDir, "moat.sock")
	cli := func(args ...string) (string, string, int) {
		cmd := exec.Command(moat, append([]string{"--socket", sock}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	records := func() []v1.AuditRecord {
		out, errOut, code := cli("audit", "export")
		if code != 0 {
			t.Fatalf("audit export: %d %s", code, errOut)
		}
		var recs []v1.AuditRecord
		sc := bufio.NewScanner(strings.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r v1.AuditRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("export line %q: %v", sc.Text(), err)
			}
			recs = append(recs, r)
		}
		return recs
	}

	var ids []string
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{
				Runtime: rt,
				Policy: &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{
					"run": {Allow: []string{"api.test"}}, "build": {Allow: []string{"api.test"}}}},
				Credentials: []v1.Credential{{Secret: "API_TOKEN", Hosts: []string{fmt.Sprintf("api.test:%d", port)}}},
			})
			ids = append(ids, sb.ID)
			out := e.mustSh(sb.ID, fmt.Sprintf(`curl -sS --max-time 10 -H "Authorization: Bearer $API_TOKEN" https://api.test:%d/audit-%s`, port, rt))
			if strings.Contains(out, canary) || !in.log.contains("path=/audit-"+rt+" auth=Bearer "+canary) {
				t.Fatalf("the credential was not injected as expected: %q %v", out, in.log.all())
			}
			if err := e.c.WriteFile(ctx, sb.ID, "/tmp/audit-file", "", strings.NewReader("twelve bytes")); err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Phase: "build"}); err != nil {
				t.Fatal(err)
			}
			e.sh(sb.ID, "", "exit 7")
			if _, err := e.c.Stop(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			// Credential records are written when the request ends: wait for it.
			deadline := time.Now().Add(10 * time.Second)
			var kinds map[string][]string
			for {
				kinds = map[string][]string{}
				out, _, _ := cli("audit", "--json", "--sandbox", sb.ID)
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					var r v1.AuditRecord
					if err := json.Unmarshal([]byte(line), &r); err != nil {
						t.Fatalf("audit --json line %q: %v", line, err)
					}
					if r.Sandbox != sb.ID {
						t.Fatalf("audit --sandbox %s gave %+v", sb.ID, r)
					}
					kinds[r.Kind] = append(kinds[r.Kind], r.Actor+" "+r.Detail)
				}
				if len(kinds["credential"]) > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			for kind, want := range map[string]string{
				"created":    "operator creating",
				"exec":       `"/bin/bash" "-l" "-c" "curl -sS`,
				"file_write": `path="/tmp/audit-file"`,
				"policy":     "phase build",
				"credential": "API_TOKEN GET https://api.test",
				"api":        "operator PUT /v1/sandboxes/" + sb.ID + "/policy",
				"transition": "stopped",
				"exec_end":   `"-c" "exit 7"`,
			} {
				if !strings.Contains(strings.Join(kinds[kind], "\n"), want) {
					t.Errorf("no %s record with %q: %v", kind, want, kinds[kind])
				}
			}
			if !slices.ContainsFunc(kinds["exec_end"], func(d string) bool { return strings.Contains(d, `"exit 7"`) && strings.HasSuffix(d, " exit=7") }) {
				t.Errorf("no exec_end record with exit=7: %v", kinds["exec_end"])
			}
			if got := strings.Join(kinds["exec"], "\n"); !strings.Contains(got, "operator ") {
				t.Errorf("exec records without their actor: %v", got)
			}
		})
	}

	e.run("follow", func(t *testing.T, e *env) {
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cmd := exec.CommandContext(fctx, moat, "--socket", sock, "audit", "--follow", "--json", "--sandbox", "follow-me")
		var mu sync.Mutex
		var buf bytes.Buffer
		pr, pw, _ := os.Pipe()
		cmd.Stdout = pw
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		go func() {
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				mu.Lock()
				buf.WriteString(sc.Text() + "\n")
				mu.Unlock()
			}
		}()
		defer cmd.Wait()
		defer cancel()
		for i := range 3 {
			if err := e.d.Store.AddAudit(ctx, "follow-me", "test", fmt.Sprintf("followed %d", i)); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			mu.Lock()
			got := buf.String()
			mu.Unlock()
			if strings.Count(got, "followed") == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("audit --follow printed %q", got)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	// The canary: nowhere in the audit output, nor in the database files.
	e.run("canary", func(t *testing.T, e *env) {
		var all bytes.Buffer
		for _, args := range [][]string{{"audit"}, {"audit", "--json"}, {"audit", "export"}, {"audit", "verify", "--json"}} {
			out, errOut, _ := cli(args...)
			all.WriteString(out + errOut)
		}
		if !strings.Contains(all.String(), "credential") {
			t.Fatalf("no credential records to search: %s", all.String())
		}
		if strings.Contains(all.String(), canary) {
			t.Errorf("the canary secret is in the audit output")
		}
		files, _ := filepath.Glob(filepath.Join(e.dataDir, "moat.db*"))
		if len(files) == 0 {
			t.Fatal("no database files")
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(data, []byte(canary)) {
				t.Errorf("the canary secret is in %s", f)
			}
		}
	})

	// The daemon signs the chain's head each sweep.
	deadline := time.Now().Add(10 * time.Second)
	for {
		cps, err := e.d.Store.AuditCheckpoints(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(cps) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon signed no checkpoint")
		}
		time.Sleep(100 * time.Millisecond)
	}
	verify := func() (v1.AuditVerification, string, int) {
		out, errOut, code := cli("audit", "verify", "--json")
		var v v1.AuditVerification
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("audit verify --json: %v\n%s\n%s", err, out, errOut)
		}
		return v, out + errOut, code
	}
	if v, out, code := verify(); code != 0 || !v.OK || v.Records < 10 || v.Checkpoints == 0 {
		t.Fatalf("verify of an intact log: %d %s", code, out)
	}
	if out, _, code := cli("audit", "verify"); code != 0 || !strings.Contains(out, "audit log OK") {
		t.Errorf("audit verify: %d %s", code, out)
	}

	db, err := sql.Open("sqlite", "file:"+filepath.Join(e.dataDir, "moat.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec1 := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(q, err)
		}
	}
	recs := records()
	if len(recs) < 10 {
		t.Fatalf("%d records", len(recs))
	}
	mid := recs[len(recs)/2]
	for _, tc := range []struct {
		name   string
		tamper func()
		undo   func()
		want   []string // "seq kind"
	}{
		{"edited", func() { exec1(`UPDATE audit SET detail = 'nothing happened' WHERE seq = ?`, mid.Seq) },
			func() { exec1(`UPDATE audit SET detail = ? WHERE seq = ?`, mid.Detail, mid.Seq) },
			[]string{fmt.Sprintf("%d edited", mid.Seq)}},
		{"removed", func() { exec1(`DELETE FROM audit WHERE seq = ?`, mid.Seq) },
			func() {
				exec1(`INSERT INTO audit(seq, time, sandbox, actor, kind, detail, prev, hash) VALUES(?,?,?,?,?,?,?,?)`,
					mid.Seq, mid.Time, mid.Sandbox, mid.Actor, mid.Kind, mid.Detail, mid.Prev, mid.Hash)
			},
			[]string{fmt.Sprintf("%d missing", mid.Seq)}},
		{"swapped", func() {
			exec1(`UPDATE audit SET seq = -1 WHERE seq = ?`, mid.Seq)
			exec1(`UPDATE audit SET seq = ? WHERE seq = ?`, mid.Seq, mid.Seq+1)
			exec1(`UPDATE audit SET seq = ? WHERE seq = -1`, mid.Seq+1)
		}, func() {
			exec1(`UPDATE audit SET seq = -1 WHERE seq = ?`, mid.Seq)
			exec1(`UPDATE audit SET seq = ? WHERE seq = ?`, mid.Seq, mid.Seq+1)
			exec1(`UPDATE audit SET seq = ? WHERE seq = -1`, mid.Seq+1)
		}, []string{fmt.Sprintf("%d reordered", mid.Seq), fmt.Sprintf("%d reordered", mid.Seq+1)}},
		{"forged checkpoint", func() { exec1(`UPDATE audit_checkpoints SET time = 'x'`) },
			func() {}, nil},
	} {
		e.run(tc.name, func(t *testing.T, e *env) {
			tc.tamper()
			v, out, code := verify()
			text, _, _ := cli("audit", "verify")
			tc.undo()
			if code == 0 || v.OK {
				t.Fatalf("verify passed a log %s: %s", tc.name, out)
			}
			var got []string
			for _, p := range v.Problems {
				if tc.want != nil && p.Kind == "checkpoint" {
					continue // a checkpoint the daemon signed at one of these records fails too
				}
				got = append(got, fmt.Sprintf("%d %s", p.Seq, p.Kind))
			}
			if tc.want == nil {
				if len(got) == 0 || !strings.HasSuffix(got[0], " checkpoint") {
					t.Errorf("problems %v, want a checkpoint problem", got)
				}
				return
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("problems %v, want %v\n%s", got, tc.want, out)
			}
			if !strings.Contains(text, fmt.Sprintf("record %d: ", mid.Seq)) {
				t.Errorf("audit verify does not name record %d:\n%s", mid.Seq, text)
			}
		})
	}
	// The forged checkpoint's row cannot be undone (its time is gone): drop it; the chain
	// from the genesis still verifies.
	exec1(`DELETE FROM audit_checkpoints`)
	if v, out, code := verify(); code != 0 || !v.OK {
		t.Fatalf("verify after undoing the tampering: %d %s", code, out)
	}

	e.run("retention", func(t *testing.T, e *env) {
		seed, err := os.ReadFile(filepath.Join(e.dataDir, "audit.key"))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(filepath.Join(e.dataDir, "audit.key"))
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("audit.key mode %v", fi.Mode())
		}
		b, err := hex.DecodeString(strings.TrimSpace(string(seed)))
		if err != nil {
			t.Fatal(err)
		}
		key := ed25519.NewKeyFromSeed(b)
		n, err := e.d.Store.PruneAudit(ctx, time.Time{}, 5, key)
		if err != nil || n == 0 {
			t.Fatalf("prune: %d %v", n, err)
		}
		if err := e.d.Store.AddAudit(ctx, "", "test", "after retention"); err != nil {
			t.Fatal(err)
		}
		v, out, code := verify()
		if code != 0 || !v.OK || v.First <= 1 || v.Records != 6 {
			t.Fatalf("verify after retention: %d %s", code, out)
		}
		// Removing what retention kept is still caught.
		first := v.First
		exec1(`DELETE FROM audit WHERE seq = ?`, first)
		if v, out, code := verify(); code == 0 || v.OK || v.Problems[0].Seq != first+1 || v.Problems[0].Kind != "anchor" {
			t.Errorf("verify with the first kept record removed: %d %s", code, out)
		}
	})
	if strings.Contains(daemonLog.String(), canary) {
		t.Error("the canary is in the daemon's log")
	}
}
