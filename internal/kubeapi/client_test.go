package kubeapi

import (
	"errors"
	"strings"
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
		{0, []byte(strings.Repeat("x", 1000)), errdefs.ErrUnavailable, `"` + strings.Repeat("x", 200) + `"`},
	}
	for _, tt := range tests {
		err := statusError("GET", "/api/v1/x", tt.code, tt.body)
		if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.text) || !strings.Contains(err.Error(), "GET /api/v1/x") {
			t.Errorf("code %d: %v; want class %v and text %q", tt.code, err, tt.class, tt.text)
		}
		if len(err.Error()) > 300 {
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
