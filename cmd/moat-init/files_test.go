package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/moatdev/moat/cmd/moat-init/internal/envd"
)

// filesRequest sends a /files request. Query values are URL-encoded;
// token "" sends no X-Access-Token.
func (in *instance) filesRequest(t *testing.T, method string, q url.Values, token string, body io.Reader, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, in.url+"/files?"+q.Encode(), body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	// No transparent decompression: the tests look at Content-Encoding.
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

type uploaded struct {
	Path, Name, Type string
}

func decodeUploaded(t *testing.T, b []byte) []uploaded {
	t.Helper()
	var out []uploaded
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("upload response %q: %v", b, err)
	}
	return out
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFilesUploadDownload(t *testing.T) {
	in := sharedInstance(t)
	dir, rel := scratch(t)

	// Octet-stream upload to a relative path in a new directory.
	resp, body := in.filesRequest(t, http.MethodPost, url.Values{"path": {rel + "/up/a.txt"}}, in.token,
		bytes.NewReader([]byte("alpha")), map[string]string{"Content-Type": "application/octet-stream"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	if got := decodeUploaded(t, body); len(got) != 1 || got[0] != (uploaded{dir + "/up/a.txt", "a.txt", "file"}) {
		t.Errorf("upload response %+v", got)
	}
	if b, _ := os.ReadFile(dir + "/up/a.txt"); string(b) != "alpha" {
		t.Errorf("uploaded content %q", b)
	}
	ownedBy(t, dir+"/up", testUser.uid)
	ownedBy(t, dir+"/up/a.txt", testUser.uid)

	// Download, plain and gzip.
	resp, body = in.filesRequest(t, http.MethodGet, url.Values{"path": {rel + "/up/a.txt"}}, in.token, nil, nil)
	if resp.StatusCode != http.StatusOK || string(body) != "alpha" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("download: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = in.filesRequest(t, http.MethodGet, url.Values{"path": {dir + "/up/a.txt"}}, in.token, nil,
		map[string]string{"Accept-Encoding": "gzip"})
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip download: Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(zr); string(b) != "alpha" {
		t.Errorf("gzip download %q", b)
	}
	resp, _ = in.filesRequest(t, http.MethodGet, url.Values{"path": {dir + "/up/a.txt"}}, in.token, nil,
		map[string]string{"Accept-Encoding": "br, identity;q=0"})
	if resp.StatusCode != http.StatusNotAcceptable {
		t.Errorf("download with no acceptable encoding: %d", resp.StatusCode)
	}

	// Gzip-encoded octet-stream upload overwrites.
	resp, body = in.filesRequest(t, http.MethodPost, url.Values{"path": {dir + "/up/a.txt"}}, in.token,
		bytes.NewReader(gzipped(t, []byte("beta"))),
		map[string]string{"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("gzip upload: %d %s", resp.StatusCode, body)
	}
	if b, _ := os.ReadFile(dir + "/up/a.txt"); string(b) != "beta" {
		t.Errorf("after gzip upload: %q", b)
	}

	// Multipart with several files, each named by its full path.
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	for name, content := range map[string]string{dir + "/multi/one.txt": "1", rel + "/multi/sub/two.txt": "22"} {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, name))
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, content)
	}
	mw.Close()
	resp, body = in.filesRequest(t, http.MethodPost, url.Values{}, in.token, &mp,
		map[string]string{"Content-Type": mw.FormDataContentType()})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("multipart upload: %d %s", resp.StatusCode, body)
	}
	if got := decodeUploaded(t, body); len(got) != 2 {
		t.Errorf("multipart response %+v", got)
	}
	for name, content := range map[string]string{"multi/one.txt": "1", "multi/sub/two.txt": "22"} {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != content {
			t.Errorf("%s: %q", name, b)
		}
	}
	ownedBy(t, dir+"/multi/sub/two.txt", testUser.uid)

	// Multipart with one file and a path parameter, as root.
	mp.Reset()
	mw = multipart.NewWriter(&mp)
	w, _ := mw.CreateFormFile("file", "ignored-name")
	io.WriteString(w, "single")
	mw.Close()
	resp, body = in.filesRequest(t, http.MethodPost, url.Values{"path": {dir + "/single.txt"}, "username": {"root"}}, in.token, &mp,
		map[string]string{"Content-Type": mw.FormDataContentType()})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("single multipart upload: %d %s", resp.StatusCode, body)
	}
	ownedBy(t, dir+"/single.txt", 0)

	// Errors.
	for name, tc := range map[string]struct {
		method string
		q      url.Values
		want   int
	}{
		"download missing":   {http.MethodGet, url.Values{"path": {dir + "/nope"}}, http.StatusNotFound},
		"download directory": {http.MethodGet, url.Values{"path": {dir}}, http.StatusBadRequest},
		"upload onto a dir":  {http.MethodPost, url.Values{"path": {dir + "/up"}}, http.StatusBadRequest},
		"unknown user":       {http.MethodGet, url.Values{"path": {dir + "/up/a.txt"}, "username": {"no-such-user-moat"}}, http.StatusUnauthorized},
		"permission denied":  {http.MethodPost, url.Values{"path": {"/root/moat-denied.txt"}}, http.StatusForbidden},
	} {
		resp, body := in.filesRequest(t, tc.method, tc.q, in.token, bytes.NewReader([]byte("x")), nil)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", name, resp.StatusCode, body, tc.want)
		}
		var e struct {
			Code    int
			Message string
		}
		if json.Unmarshal(body, &e) != nil || e.Code != tc.want || e.Message == "" {
			t.Errorf("%s: error body %q", name, body)
		}
	}
	if _, err := os.Stat(troot.dir + "/root/moat-denied.txt"); err == nil {
		t.Error("the unprivileged user wrote into /root")
	}
	resp, _ = in.filesRequest(t, http.MethodGet, url.Values{"path": {dir + "/up/a.txt"}}, "", nil, nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("download without a token: %d", resp.StatusCode)
	}
}

func TestFilesMetadata(t *testing.T) {
	in := sharedInstance(t)
	dir, _ := scratch(t)
	resp, body := in.filesRequest(t, http.MethodPost, url.Values{"path": {dir + "/m.txt"}}, in.token,
		bytes.NewReader([]byte("m")), map[string]string{"Content-Type": "application/octet-stream", "X-Metadata-Color": "blue"})
	if resp.StatusCode == http.StatusInternalServerError && bytes.Contains(body, []byte("not supported")) {
		t.Skip("no user extended attributes on this filesystem")
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload with metadata: %d %s", resp.StatusCode, body)
	}
	st := statEntry(t, in, dir+"/m.txt")
	if st.GetMetadata()["color"] != "blue" {
		t.Errorf("metadata %v", st.GetMetadata())
	}
	// An overwrite's metadata replaces the file's; one without metadata leaves none.
	for _, tc := range []struct {
		hdr  map[string]string
		want map[string]string
	}{
		{map[string]string{"X-Metadata-Shape": "round"}, map[string]string{"shape": "round"}},
		{nil, nil},
	} {
		hdr := map[string]string{"Content-Type": "application/octet-stream"}
		for k, v := range tc.hdr {
			hdr[k] = v
		}
		resp, body := in.filesRequest(t, http.MethodPost, url.Values{"path": {dir + "/m.txt"}}, in.token, bytes.NewReader([]byte("n")), hdr)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("overwrite: %d %s", resp.StatusCode, body)
		}
		if got := statEntry(t, in, dir+"/m.txt").GetMetadata(); len(got) != len(tc.want) || got["shape"] != tc.want["shape"] {
			t.Errorf("after an overwrite with %v: metadata %v, want %v", tc.hdr, got, tc.want)
		}
	}
}

func TestSignedURLs(t *testing.T) {
	in := sharedInstance(t)
	dir, _ := scratch(t)
	path := dir + "/signed.txt"
	tok := envd.NewToken(in.token)
	user := testUser.name
	exp := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)

	q := func(sig, exp string) url.Values {
		v := url.Values{"path": {path}, "username": {user}, "signature": {sig}}
		if exp != "" {
			v.Set("signature_expiration", exp)
		}
		return v
	}
	// Upload with a write signature that expires in a minute.
	resp, body := in.filesRequest(t, http.MethodPost, q(tok.Sign(path, "write", user, exp), exp), "",
		bytes.NewReader([]byte("signed")), map[string]string{"Content-Type": "application/octet-stream"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("signed upload: %d %s", resp.StatusCode, body)
	}
	// Download with a read signature without expiry.
	resp, body = in.filesRequest(t, http.MethodGet, q(tok.Sign(path, "read", user, ""), ""), "", nil, nil)
	if resp.StatusCode != http.StatusOK || string(body) != "signed" {
		t.Fatalf("signed download: %d %q", resp.StatusCode, body)
	}
	for name, v := range map[string]url.Values{
		"read signature for a write": q(tok.Sign(path, "read", user, ""), ""),
		"expired":                    q(tok.Sign(path, "write", user, past), past),
		"wrong token":                q(envd.NewToken("other").Sign(path, "write", user, ""), ""),
		"other path":                 q(tok.Sign(path+"x", "write", user, ""), ""),
		"expiration not signed":      q(tok.Sign(path, "write", user, ""), exp),
		"garbage":                    q("v1_!!!", ""),
		"no signature":               {"path": {path}},
	} {
		resp, body := in.filesRequest(t, http.MethodPost, v, "", bytes.NewReader([]byte("evil")),
			map[string]string{"Content-Type": "application/octet-stream"})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", name, resp.StatusCode, body)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "signed" {
		t.Errorf("file overwritten by a refused upload: %q", b)
	}
	// Without a username the default user applies; the SDK then signs
	// with an empty user.
	resp, body = in.filesRequest(t, http.MethodGet, url.Values{"path": {path}, "signature": {tok.Sign(path, "read", "", "")}}, "", nil, nil)
	if resp.StatusCode != http.StatusOK || string(body) != "signed" {
		t.Errorf("signed download without username: %d %q", resp.StatusCode, body)
	}
	// Signatures open /files only.
	resp, err := http.Post(in.url+"/process.Process/List?"+q(tok.Sign(path, "write", user, ""), "").Encode(),
		"application/json", bytes.NewReader([]byte("{}")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("RPC with a file signature: %d", resp.StatusCode)
	}
}
