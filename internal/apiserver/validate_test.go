package apiserver

import (
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTimeoutSeconds(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want time.Duration
		ok   bool
	}{
		{0, 0, true},
		{300, 300 * time.Second, true},
		{int64(MaxTimeout / time.Second), MaxTimeout, true},
		{int64(MaxTimeout/time.Second) + 1, 0, false},
		{math.MaxInt64 / int64(time.Second) * 2, 0, false}, // would overflow a time.Duration
		{math.MaxInt64, 0, false},
		{-1, 0, false},
		{math.MinInt64, 0, false},
	} {
		got, err := timeoutSeconds("timeout", c.n)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("timeoutSeconds(%d) = %v, %v; want %v, ok=%v", c.n, got, err, c.want, c.ok)
		}
	}
}

// TestRequestValidation: a timeout that would overflow, JSON after the body, and a known
// route asked with another method are refused with what is wrong, before anything runs.
func TestRequestValidation(t *testing.T) {
	api, _, _ := newTestServer(t)
	send := func(method, path, body string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(method, api.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer good")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	huge := strconv.FormatInt(1e15, 10)
	for _, c := range []struct {
		method, path, body string
		status             int
		says               string
	}{
		// The fake manager answers 500 "disk on fire" to a create that reaches it.
		{"POST", "/v1/sandboxes", `{"timeout_seconds": 60}`, 500, "disk on fire"},
		{"POST", "/v1/sandboxes", `{"timeout_seconds": ` + huge + `}`, 400, "at most 31536000"},
		{"POST", "/v1/sandboxes", `{"timeout_seconds": -5}`, 400, "must not be negative"},
		{"POST", "/v1/sandboxes", `{"timeout_seconds": 60} {"runtime": "x"}`, 400, "found more"},
		{"POST", "/v1/sandboxes", `{"timeout_seconds": 60}]`, 400, "found more"},
		{"POST", "/v1/sandboxes", "{\"timeout_seconds\": 60}\n\t ", 500, "disk on fire"},
		{"POST", "/sandboxes", `{"templateID": "base", "timeout": ` + huge + `}`, 400, "at most 31536000"},
		{"POST", "/sandboxes/sb-running/timeout", `{"timeout": ` + huge + `}`, 400, "at most 31536000"},
		{"POST", "/sandboxes/sb-running/connect", `{"timeout": ` + huge + `}`, 400, "at most 31536000"},
		{"PATCH", "/v1/sandboxes", ``, 405, "GET, HEAD, POST"},
		{"PUT", "/v1/sandboxes/sb-running/stop", ``, 405, "POST"},
		{"DELETE", "/sandboxes/sb-running/timeout", ``, 405, "POST"},
		{"GET", "/v1/no-such-route", ``, 404, "no route"},
	} {
		status, hdr, body := send(c.method, c.path, c.body)
		if status != c.status || !strings.Contains(body, c.says) {
			t.Errorf("%s %s %q: %d %s; want %d saying %q", c.method, c.path, c.body, status, body, c.status, c.says)
		}
		if status == 405 && hdr.Get("Allow") != c.says {
			t.Errorf("%s %s: Allow %q; want %q", c.method, c.path, hdr.Get("Allow"), c.says)
		}
	}
}
