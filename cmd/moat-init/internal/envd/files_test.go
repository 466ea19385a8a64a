package envd

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

// downloadServer is a Server whose downloads run as root (the test's own user when not
// root: RunAs then calls through).
func downloadServer(t *testing.T) *Server {
	t.Helper()
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	group := filepath.Join(dir, "group")
	uid := strconv.Itoa(os.Getuid())
	os.WriteFile(passwd, []byte("root:x:"+uid+":"+uid+"::"+dir+":/bin/sh\n"), 0o644)
	os.WriteFile(group, []byte("root:x:"+uid+":\n"), 0o644)
	return New(Config{DefaultUser: "root", Users: users.NewDB(passwd, group), Log: slog.New(slog.DiscardHandler)})
}

// get runs GET /files?path=p against s's download handler and returns the response with
// its body decompressed if gzip.
func get(t *testing.T, s *Server, p string, gz bool, w http.ResponseWriter) *http.Response {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/files?"+url.Values{"path": {p}}.Encode(), nil)
	if gz {
		r.Header.Set("Accept-Encoding", "gzip")
	}
	rec := httptest.NewRecorder()
	if w == nil {
		w = rec
	}
	done := make(chan struct{})
	go func() { defer close(done); s.download(w, r) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("GET %s did not return", p)
	}
	resp := rec.Result()
	if g, ok := w.(*growingWriter); ok {
		resp = g.rec.Result()
	}
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body = io.NopCloser(bytes.NewReader(data))
	}
	return resp
}

// TestDownloadRefusesNonRegular: a regular file (also behind a symlink) downloads; a
// character device, a symlink to one, a FIFO (without blocking) and a directory are
// refused with 400 naming what the path is, and no byte of them is sent.
func TestDownloadRefusesNonRegular(t *testing.T) {
	s := downloadServer(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "f.txt")
	os.WriteFile(file, []byte("hello\n"), 0o644)
	os.Symlink(file, filepath.Join(dir, "link-to-file"))
	os.Symlink("/dev/zero", filepath.Join(dir, "link-to-zero"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		code int
		want string // in the body
	}{
		{file, 200, "hello\n"},
		{filepath.Join(dir, "link-to-file"), 200, "hello\n"},
		{"/dev/zero", 400, "is a character device"},
		{"/dev/urandom", 400, "is a character device"},
		{filepath.Join(dir, "link-to-zero"), 400, "is a character device"},
		{filepath.Join(dir, "fifo"), 400, "is a FIFO"},
		{dir, 400, "is a directory"},
		{filepath.Join(dir, "missing"), 404, "no such file"},
	} {
		for _, gz := range []bool{false, true} {
			resp := get(t, s, c.path, gz, nil)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.code || !strings.Contains(string(body), c.want) || len(body) > 1024 {
				t.Errorf("GET %s (gzip %v): %d %.200q, want %d with %q", c.path, gz, resp.StatusCode, body, c.code, c.want)
			}
		}
	}
}

// growingWriter appends to a file on the first write of a download: the file grows while
// it is served.
type growingWriter struct {
	rec  *httptest.ResponseRecorder
	path string
	done bool
}

func (g *growingWriter) Header() http.Header { return g.rec.Header() }
func (g *growingWriter) WriteHeader(c int)   { g.rec.WriteHeader(c) }
func (g *growingWriter) Write(p []byte) (int, error) {
	if !g.done {
		g.done = true
		f, err := os.OpenFile(g.path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return 0, err
		}
		f.Write(bytes.Repeat([]byte("+"), 4<<20))
		f.Close()
	}
	return g.rec.Write(p)
}

// TestDownloadBoundedBySize: a file that grows while it is downloaded is sent only up to
// the size it had when opened, compressed or not.
func TestDownloadBoundedBySize(t *testing.T) {
	s := downloadServer(t)
	const size = 256 << 10
	for _, gz := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "grows")
		os.WriteFile(path, bytes.Repeat([]byte("a"), size), 0o644)
		resp := get(t, s, path, gz, &growingWriter{rec: httptest.NewRecorder(), path: path})
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || len(body) != size || bytes.Contains(body, []byte("+")) {
			t.Errorf("gzip %v: %d, %d bytes (want %d, none appended)", gz, resp.StatusCode, len(body), size)
		}
		if st, _ := os.Stat(path); st.Size() <= size {
			t.Errorf("gzip %v: the file did not grow during the test", gz)
		}
		if cl := resp.Header.Get("Content-Length"); !gz && cl != strconv.Itoa(size) {
			t.Errorf("Content-Length %q", cl)
		}
	}
}
