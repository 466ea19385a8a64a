package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// TestTeamVisibility (issue 17 part 3): over the TCP listener of a real daemon, key A's
// private sandbox does not exist for key B (get, exec, files: not found; absent from its
// list). After `visibility team` B runs commands in it and reads its files (the file B's
// command wrote is in the sandbox, read back by the operator), but its delete, stop and
// policy change are refused 403 and the sandbox stays running with its policy; on the E2B
// API B lists and gets it (without the envd token) but kill, connect and timeout are 403. A's fork of
// it is A's and private. The owner name and visibility are in the store and survive a
// daemon restart; the visibility change is in the audit log. Admin key C sees and deletes
// the sandbox.
func TestTeamVisibility(t *testing.T) {
	addr := freeLoopbackAddr(t)
	configure := func(c *daemon.Config) { c.Listen = addr }
	e := newEnvWith(t, configure)
	ctx := context.Background()
	mkKey := func(req v1.APIKeyRequest) (*v1.APIKey, *sdk.Client) {
		k, err := e.c.CreateAPIKeyWith(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return k, sdk.NewHTTP("http://"+addr, k.Key)
	}
	keyA, a := mkKey(v1.APIKeyRequest{Owner: "alice"})
	keyB, b := mkKey(v1.APIKeyRequest{Owner: "bob"})
	_, c := mkKey(v1.APIKeyRequest{Owner: "carol", Admin: true})
	if keys, err := e.c.APIKeys(ctx); err != nil || len(keys) != 3 {
		t.Fatalf("keys: %+v %v", keys, err)
	}

	sb, err := a.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 512 << 20, DiskBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Owner != keyA.ID || sb.OwnerName != "alice" || sb.Visibility != v1.VisibilityPrivate {
		t.Fatalf("key A's sandbox: %q %q %q", sb.Owner, sb.OwnerName, sb.Visibility)
	}
	e.mustSh(sb.ID, "echo from-a > /tmp/a.txt")
	execAs := func(cl *sdk.Client, line string) error {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		code, err := cl.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", line}})
		if err == nil && code != 0 {
			err = fmt.Errorf("exit code %d", code)
		}
		return err
	}
	readAs := func(cl *sdk.Client, path string) (string, error) {
		f, err := cl.ReadFile(ctx, sb.ID, path, "")
		if err != nil {
			return "", err
		}
		defer f.Close()
		data, err := io.ReadAll(f)
		return string(data), err
	}

	// Private: B sees nothing.
	if _, err := b.Get(ctx, sb.ID); !isNotFound(err) {
		t.Errorf("key B gets A's private sandbox: %v", err)
	}
	if err := execAs(b, "echo from-b > /tmp/b-private.txt"); !isNotFound(err) {
		t.Errorf("key B runs a command in A's private sandbox: %v", err)
	}
	if _, err := readAs(b, "/tmp/a.txt"); !isNotFound(err) {
		t.Errorf("key B reads a file of A's private sandbox: %v", err)
	}
	if list, err := b.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("key B lists %+v (%v)", list, err)
	}
	if _, err := b.SetVisibility(ctx, sb.ID, v1.VisibilityTeam); !isNotFound(err) {
		t.Errorf("key B makes A's private sandbox team: %v", err)
	}
	ask, err := a.AskApproval(ctx, v1.AskApprovalRequest{Sandbox: sb.ID, Tool: "deploy", WaitSeconds: 120})
	if err != nil {
		t.Fatal(err)
	}
	if list, err := b.Approvals(ctx, "", "", ""); err != nil || len(list) != 0 {
		t.Errorf("key B lists the approvals of A's private sandbox: %+v %v", list, err)
	}
	if _, err := b.Approval(ctx, ask.ID, 0); !isNotFound(err) {
		t.Errorf("key B gets an approval of A's private sandbox: %v", err)
	}

	// Team: B uses it, manages nothing.
	if got, err := a.SetVisibility(ctx, sb.ID, v1.VisibilityTeam); err != nil || got.Visibility != v1.VisibilityTeam {
		t.Fatalf("key A makes its sandbox team: %+v %v", got, err)
	}
	if got, err := b.Get(ctx, sb.ID); err != nil || got.OwnerName != "alice" || got.Visibility != v1.VisibilityTeam {
		t.Errorf("key B gets the team sandbox: %+v %v", got, err)
	}
	if list, err := b.List(ctx); err != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Errorf("key B lists %+v (%v)", list, err)
	}
	if err := execAs(b, "echo from-b > /tmp/b.txt"); err != nil {
		t.Errorf("key B runs a command in the team sandbox: %v", err)
	}
	if got := strings.TrimSpace(e.mustSh(sb.ID, "cat /tmp/b.txt; test ! -e /tmp/b-private.txt && echo none-before")); got != "from-b\nnone-before" {
		t.Errorf("in the sandbox after B's commands: %q", got)
	}
	if got, err := readAs(b, "/tmp/a.txt"); err != nil || got != "from-a\n" {
		t.Errorf("key B reads A's file: %q %v", got, err)
	}
	if err := b.Delete(ctx, sb.ID); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("key B deletes the team sandbox: %v", err)
	}
	if _, err := b.Stop(ctx, sb.ID); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("key B stops the team sandbox: %v", err)
	}
	if _, err := b.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Policy: &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"example.com"}}}}}); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("key B changes the team sandbox's policy: %v", err)
	}
	if _, err := b.SetVisibility(ctx, sb.ID, v1.VisibilityPrivate); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("key B makes the team sandbox private: %v", err)
	}
	if _, err := b.Fork(ctx, sb.ID, 1); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("key B forks the team sandbox: %v", err)
	}
	// B sees the team sandbox's approvals, and may not decide them.
	if list, err := b.Approvals(ctx, "", "", ""); err != nil || len(list) != 1 || list[0].ID != ask.ID {
		t.Errorf("key B lists the team sandbox's approvals: %+v %v", list, err)
	}
	if _, err := b.DenyApproval(ctx, ask.ID, "no"); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("key B denies the team sandbox's approval: %v", err)
	}
	if got, err := e.c.Approval(ctx, ask.ID, 0); err != nil || got.State != "pending" {
		t.Errorf("the approval after B's deny: %+v %v", got, err)
	}
	// The E2B API of key B: lists it, gets it without the envd token, may not kill it,
	// connect to it (which hands out the token) or change its timeout.
	e2b := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(`{"timeout":60}`))
		req.Header.Set("X-API-KEY", keyB.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	token := ""
	if r, err := e.d.Store.Get(ctx, sb.ID); err == nil {
		token = r.AccessToken
	}
	if code, body := e2b("GET", "/v2/sandboxes"); code != 200 || !strings.Contains(body, sb.ID) {
		t.Errorf("key B's E2B list: %d %s", code, body)
	}
	if code, body := e2b("GET", "/sandboxes/"+sb.ID); code != 200 || token == "" || strings.Contains(body, token) {
		t.Errorf("key B's E2B detail: %d %s", code, body)
	}
	for _, m := range [][2]string{{"DELETE", "/sandboxes/" + sb.ID}, {"POST", "/sandboxes/" + sb.ID + "/connect"}, {"POST", "/sandboxes/" + sb.ID + "/timeout"}} {
		if code, body := e2b(m[0], m[1]); code != 403 || strings.Contains(body, token) {
			t.Errorf("key B's E2B %s %s: %d %s", m[0], m[1], code, body)
		}
	}
	rec, err := e.d.Store.Get(ctx, sb.ID)
	if err != nil || rec.State != "running" || rec.ExpiresAt != nil || rec.Policy != nil || rec.OwnerName != "alice" || rec.Visibility != "team" {
		t.Errorf("the stored sandbox after B's refused requests: %+v %v", rec, err)
	}
	recs, err := e.c.Audit(ctx, sb.ID, time.Time{}, 0, 0)
	found := false
	for _, r := range recs {
		found = found || r.Kind == "visibility" && r.Detail == "private -> team"
	}
	if err != nil || !found {
		t.Errorf("the visibility change is not in the audit log: %+v %v", recs, err)
	}

	// A's fork is A's, and private.
	rep, err := a.Fork(ctx, sb.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	fork := rep.Forks[0]
	if fork.Owner != keyA.ID || fork.OwnerName != "alice" || fork.Visibility != v1.VisibilityPrivate {
		t.Errorf("the fork: %q %q %q", fork.Owner, fork.OwnerName, fork.Visibility)
	}
	if _, err := b.Get(ctx, fork.ID); !isNotFound(err) {
		t.Errorf("key B gets A's fork: %v", err)
	}
	// Admin C sees the private fork and deletes it.
	if list, err := c.List(ctx); err != nil || len(list) != 2 {
		t.Errorf("admin key C lists %+v (%v)", list, err)
	}
	deleted := func(id string) {
		t.Helper()
		if err := c.Delete(ctx, id); err != nil {
			t.Errorf("admin key C deletes %s: %v", id, err)
		}
		testutil.WaitFor(t, time.Minute, id+" gone from the store after the admin's delete", func() bool {
			_, err := e.d.Store.Get(ctx, id)
			return errdefs.IsNotFound(err)
		})
	}
	deleted(fork.ID)

	// A restart keeps owner names, visibility and the keys' owners.
	e.stop()
	e.start(filepath.Join(testutil.Binaries(t), "moat-init"), configure)
	if rec, err := e.d.Store.Get(ctx, sb.ID); err != nil || rec.OwnerName != "alice" || rec.Visibility != "team" || rec.Owner != keyA.ID {
		t.Errorf("after a restart: %+v %v", rec, err)
	}
	if got, err := b.Get(ctx, sb.ID); err != nil || got.OwnerName != "alice" || got.Visibility != v1.VisibilityTeam {
		t.Errorf("key B after a restart: %+v %v", got, err)
	}
	if err := b.Delete(ctx, sb.ID); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("key B deletes the team sandbox after a restart: %v", err)
	}
	if keys, err := e.c.APIKeys(ctx); err != nil || !hasKey(keys, "carol", true) || !hasKey(keys, "alice", false) {
		t.Errorf("keys after a restart: %+v %v", keys, err)
	}

	// Admin C deletes the team sandbox.
	deleted(sb.ID)
}

func hasKey(keys []v1.APIKey, owner string, admin bool) bool {
	for _, k := range keys {
		if k.Owner == owner && k.Admin == admin {
			return true
		}
	}
	return false
}
