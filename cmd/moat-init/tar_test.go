package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tarRequest sends a /moat/tar request with the access token; it returns the response
// with its body read (trailers are then filled in).
func (in *instance) tarRequest(t *testing.T, method string, q url.Values, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, in.url+"/moat/tar?"+q.Encode(), body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Access-Token", in.token)
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func tarOf(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "content of " + h.Name
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestTarRoutes: POST /moat/tar extracts as the user (owner, modes, links; a tree renamed
// to a new path, or put into an existing directory), refuses an entry through a symlink
// the stream made before writing it, and GET /moat/tar gives the tree back with an "ok"
// trailer; a file the user cannot read cuts the stream with an error trailer; a device is
// refused before any byte.
func TestTarRoutes(t *testing.T) {
	in := sharedInstance(t)
	dir, rel := scratch(t)
	tree := tarOf(t,
		tar.Header{Name: "src/", Typeflag: tar.TypeDir, Mode: 0o750},
		tar.Header{Name: "src/run", Typeflag: tar.TypeReg, Mode: 0o700},
		tar.Header{Name: "src/l", Typeflag: tar.TypeSymlink, Linkname: "/etc/hostname"})
	resp, body := in.tarRequest(t, http.MethodPost, url.Values{"path": {rel + "/new"}}, bytes.NewReader(tree))
	var res struct{ Entries int }
	if resp.StatusCode != 200 || json.Unmarshal(body, &res) != nil || res.Entries != 3 {
		t.Fatalf("POST: %s %s", resp.Status, body)
	}
	for p, want := range map[string]string{"new": "drwxr-x---", "new/run": "-rwx------", "new/l": "Lrwxrwxrwx"} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil || fi.Mode().String() != want {
			t.Errorf("%s: %v %v, want %s", p, fi, err, want)
			continue
		}
		ownedBy(t, filepath.Join(dir, p), testUser.uid)
	}
	// Into an existing directory, under the tree's own name.
	if resp, body := in.tarRequest(t, http.MethodPost, url.Values{"path": {rel + "/new"}}, bytes.NewReader(tree)); resp.StatusCode != 200 {
		t.Fatalf("POST into a directory: %s %s", resp.Status, body)
	}
	if _, err := os.Lstat(filepath.Join(dir, "new/src/run")); err != nil {
		t.Errorf("into a directory: %v", err)
	}
	// Through a symlink the stream made: refused before the write.
	hostile := tarOf(t,
		tar.Header{Name: "h/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "h/l", Typeflag: tar.TypeSymlink, Linkname: dir + "/victim"},
		tar.Header{Name: "h/l/x", Typeflag: tar.TypeReg, Mode: 0o644})
	resp, body = in.tarRequest(t, http.MethodPost, url.Values{"path": {rel + "/hostile"}}, bytes.NewReader(hostile))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "symlink made earlier") {
		t.Errorf("POST through a symlink: %s %s", resp.Status, body)
	}
	if _, err := os.Lstat(filepath.Join(dir, "victim")); err == nil {
		t.Error("written through the symlink")
	}

	// Back out.
	resp, body = in.tarRequest(t, http.MethodGet, url.Values{"path": {rel + "/new"}}, nil)
	if resp.StatusCode != 200 || resp.Trailer.Get("X-Moat-Tar-Status") != "ok" {
		t.Fatalf("GET: %s, trailer %q", resp.Status, resp.Trailer)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(body))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name+" "+h.FileInfo().Mode().String()+" "+h.Linkname)
	}
	want := []string{"new/ drwxr-x--- ", "new/l Lrwxrwxrwx /etc/hostname", "new/run -rwx------ ", "new/src/ drwxr-x--- ", "new/src/l Lrwxrwxrwx /etc/hostname", "new/src/run -rwx------ "}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Errorf("GET entries:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}

	// A file the user cannot read cuts the stream, and says so.
	if err := os.WriteFile(filepath.Join(dir, "new/zz-secret"), []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, _ = in.tarRequest(t, http.MethodGet, url.Values{"path": {rel + "/new"}}, nil)
	if st := resp.Trailer.Get("X-Moat-Tar-Status"); !strings.Contains(st, "error") || !strings.Contains(st, "permission denied") {
		t.Errorf("GET with an unreadable file: trailer %q", st)
	}
	resp, body = in.tarRequest(t, http.MethodGet, url.Values{"path": {"/dev/null"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "character device") {
		t.Errorf("GET /dev/null: %s %s", resp.Status, body)
	}
}
