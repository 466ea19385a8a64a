package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestStatusError(t *testing.T) {
	status := func(code, reason, msg string) []byte {
		return []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"` + msg + `","reason":"` + reason + `","code":` + code + `}`)
	}
	tests := []struct {
		code  int
		body  []byte
		class error
		text  string // in the message
	}{
		{404, status("404", "NotFound", `pods \"p\" not found`), errdefs.ErrNotFound, `GET /api/v1/x: 404 NotFound: pods "p" not found`},
		{409, status("409", "AlreadyExists", `pods \"p\" already exists`), errdefs.ErrAlreadyExists, "AlreadyExists"},
		{409, status("409", "Conflict", "the object has been modified"), errdefs.ErrConflict, "has been modified"},
		{410, status("410", "Expired", "too old resource version"), errdefs.ErrConflict, "too old"},
		{401, status("401", "Unauthorized", "Unauthorized"), errdefs.ErrUnauthenticated, "401"},
		{403, status("403", "Forbidden", `pods is forbidden: User \"system:anonymous\" cannot list`), errdefs.ErrPermissionDenied, "cannot list"},
		{422, status("422", "Invalid", "spec.containers: Required value"), errdefs.ErrInvalidArgument, "Required value"},
		{400, status("400", "BadRequest", "bad"), errdefs.ErrInvalidArgument, "bad"},
		{413, nil, errdefs.ErrInvalidArgument, "Request Entity Too Large"},
		{429, status("429", "TooManyRequests", "slow down"), errdefs.ErrUnavailable, "slow down"},
		{500, status("500", "InternalError", "etcd"), errdefs.ErrUnavailable, "etcd"},
		{503, []byte("<html>proxy error</html>"), errdefs.ErrUnavailable, `"<html>proxy error</html>"`},
		{302, nil, errdefs.ErrUnavailable, "302 Found"},
		{0, []byte(strings.Repeat("x", 1000)), errdefs.ErrUnavailable, `"` + strings.Repeat("x", 200) + `..."`},
		{500, status("500", "InternalError", strings.Repeat("y", 5000)), errdefs.ErrUnavailable, strings.Repeat("y", 1024) + "...: unavailable"},
	}
	for _, tt := range tests {
		err := statusError("GET", "/api/v1/x", tt.code, tt.body)
		if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.text) || !strings.Contains(err.Error(), "GET /api/v1/x") {
			t.Errorf("code %d: %v; want class %v and text %q", tt.code, err, tt.class, tt.text)
		}
		if len(err.Error()) > 1200 {
			t.Errorf("code %d: message of %d bytes", tt.code, len(err.Error()))
		}
	}
	if !isGone(statusError("WATCH", "/p", 410, nil)) || isGone(statusError("GET", "/p", 409, nil)) {
		t.Error("isGone")
	}
}

func TestCheckName(t *testing.T) {
	for _, s := range []string{"a", "default", "moat-sbx-0123", "node-1.example.com", "9", strings.Repeat("a", 253)} {
		if err := checkName("pod name", s, 253); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"", ".", "..", "a/b", "a%2Fb", "../nodes", "-a", "a-", ".a", "a.", "A", "a_b", "a b", "a?b", "a#b", "é", strings.Repeat("a", 254)} {
		if err := checkName("pod name", s, 253); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: accepted", s)
		}
	}
	if err := checkName("namespace", strings.Repeat("a", 64), 63); err == nil {
		t.Error("a 64-byte namespace accepted")
	}
	if _, err := podPath("default", "../../nodes/n1"); err == nil {
		t.Error("podPath accepted a name with ..")
	}
	if p, err := podPath("", ""); err != nil || p != "/api/v1/pods" {
		t.Errorf("all namespaces: %q, %v", p, err)
	}
	if p, err := podPath("ns", "p"); err != nil || p != "/api/v1/namespaces/ns/pods/p" {
		t.Errorf("one Pod: %q, %v", p, err)
	}
}

// TestListPages: a list follows the server's continue tokens with limit 500, and stops on
// a server that repeats one.
func TestListPages(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	c := fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		q := r.URL.Query()
		asked = append(asked, r.URL.Path+"?"+q.Encode())
		next := map[string]string{"": "p2", "p2": "p3", "p3": "", "loop": "loop"}[q.Get("continue")]
		if q.Get("labelSelector") == "loop=1" {
			next = "loop"
		}
		fmt.Fprintf(w, `{"metadata":{"continue":%q,"resourceVersion":"1"},"items":[%s]}`, next, podJSON("pod-"+q.Get("continue"), "1"))
	})
	pods, err := c.ListPods(context.Background(), "", "app in (a,b)")
	if err != nil || len(pods) != 3 || pods[2].Metadata.Name != "pod-p3" {
		t.Fatalf("ListPods: %d Pods, %v", len(pods), err)
	}
	want := []string{
		"/api/v1/pods?labelSelector=app+in+%28a%2Cb%29&limit=500",
		"/api/v1/pods?continue=p2&labelSelector=app+in+%28a%2Cb%29&limit=500",
		"/api/v1/pods?continue=p3&labelSelector=app+in+%28a%2Cb%29&limit=500",
	}
	mu.Lock()
	if !reflect.DeepEqual(asked, want) {
		t.Errorf("asked\n%q\nwant\n%q", asked, want)
	}
	mu.Unlock()
	if _, err := c.ListNodes(context.Background(), "loop=1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a server that repeats its continue token: %v", err)
	}
}

// TestTokenFile: a token file is read at New, used for a minute, then read again (service
// account tokens rotate); a failed re-read keeps the last token; an empty file is refused.
func TestTokenFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("\n")
	if _, err := New(Config{Server: "https://h", TokenFile: file}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("empty token file: %v", err)
	}
	write("one\n")
	c, err := New(Config{Server: "https://h", TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	write("two")
	if tok, _ := c.bearer(); tok != "one" {
		t.Errorf("within the minute: %q, want one", tok)
	}
	c.readAt = c.readAt.Add(-tokenMaxAge)
	if tok, _ := c.bearer(); tok != "two" {
		t.Errorf("after a minute: %q, want two", tok)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	c.readAt = c.readAt.Add(-tokenMaxAge)
	if tok, err := c.bearer(); tok != "two" || err != nil {
		t.Errorf("file gone: %q, %v; want the last token", tok, err)
	}
	if _, err := New(Config{Server: "https://h", TokenFile: file}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing token file: %v", err)
	}
	if _, err := New(Config{Server: "http://h", Token: "t"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("http server: %v", err)
	}
	if _, err := New(Config{Server: "https://h", CAData: []byte("not PEM")}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("CA data without a certificate: %v", err)
	}
}
