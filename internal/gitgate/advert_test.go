package gitgate

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestFilterAdvertisement(t *testing.T) {
	hdr := []string{"# service=git-receive-pack", ""}
	for _, tc := range []struct {
		name string
		in   []byte
		want []byte // nil: error
		err  error
	}{
		{
			name: "strips push-cert and push-options",
			in:   body(append(hdr, a1+" refs/heads/main\x00report-status push-cert=1234-abcd push-options side-band-64k agent=git/2.39", b1+" refs/heads/x", ""), ""),
			want: body(append(hdr, a1+" refs/heads/main\x00report-status side-band-64k agent=git/2.39", b1+" refs/heads/x", ""), ""),
		},
		{
			name: "empty repository, version 1",
			in:   body(append(hdr, "version 1", z1+" capabilities^{}\x00push-options delete-refs", ""), ""),
			want: body(append(hdr, "version 1", z1+" capabilities^{}\x00delete-refs", ""), ""),
		},
		{
			name: "stops at the final flush",
			in:   body(append(hdr, a1+" refs/heads/main\x00report-status", ""), "trailing"),
			want: body(append(hdr, a1+" refs/heads/main\x00report-status", ""), ""),
		},
		{name: "no header", in: body([]string{a1 + " refs/heads/main\x00report-status", ""}, ""), err: errdefs.ErrInvalidArgument},
		{name: "upload-pack", in: body([]string{"# service=git-upload-pack", "", a1 + " HEAD\x00x", ""}, ""), err: errdefs.ErrInvalidArgument},
		{name: "no flush after header", in: body([]string{"# service=git-receive-pack", a1 + " refs/heads/main\x00x", ""}, ""), err: errdefs.ErrInvalidArgument},
		{name: "version 2", in: body(append(hdr, "version 2", "agent=git/2.39", ""), ""), err: errdefs.ErrInvalidArgument},
		{name: "no capabilities", in: body(append(hdr, a1+" refs/heads/main", ""), ""), err: errdefs.ErrInvalidArgument},
		{name: "delim", in: append(body(hdr, ""), "0001"...), err: errdefs.ErrInvalidArgument},
		{name: "cut short", in: body(append(hdr, a1+" refs/heads/main\x00x"), ""), err: io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := FilterAdvertisement(&out, bytes.NewReader(tc.in))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), tc.want) {
				t.Fatalf("got\n%q\nwant\n%q", out.Bytes(), tc.want)
			}
		})
	}
}

// With the filtered advertisement of a real git server that offers signed pushes and push
// options, git itself refuses --signed and -o before sending anything.
func TestRealGitFilteredAdvertisement(t *testing.T) {
	g := newGitEnv(t)
	root := t.TempDir()
	g.must(root, "init", "-q", "--bare", "srv.git")
	srvRepo := filepath.Join(root, "srv.git")
	g.must(srvRepo, "config", "http.receivepack", "true")
	g.must(srvRepo, "config", "receive.certNonceSeed", "moat-test-seed")
	g.must(srvRepo, "config", "receive.advertisePushOptions", "true")
	rec := newRecordingBackend(t, g, root)
	filter := true
	var raw []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s, _, _ := Classify(r.Method, r.URL); s != PushAdvertisement || !filter {
			rec.ServeHTTP(w, r)
			return
		}
		up := httptest.NewRecorder()
		rec.ServeHTTP(up, r)
		raw = up.Body.Bytes()
		var out bytes.Buffer
		if err := FilterAdvertisement(&out, bytes.NewReader(raw)); err != nil {
			t.Errorf("FilterAdvertisement: %v", err)
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", up.Header().Get("Content-Type"))
		_, _ = w.Write(out.Bytes())
	}))
	defer srv.Close()
	url := srv.URL + "/srv.git"

	client := t.TempDir()
	g.must(client, "init", "-q", "-b", "main")
	g.commit(client, "README", "x\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "--signed", url, "HEAD:refs/heads/agent/t/x"}, "the receiving end does not support --signed push"},
		{[]string{"push", "-o", "ci.skip", url, "HEAD:refs/heads/agent/t/x"}, "the receiving end does not support push options"},
	} {
		_, stderr, err := g.run(client, nil, tc.args...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(stderr, tc.want) {
			t.Errorf("git %v: %v, stderr lacks %q:\n%s", tc.args, err, tc.want, stderr)
		}
	}
	if !bytes.Contains(raw, []byte("push-cert=")) || !bytes.Contains(raw, []byte("push-options")) {
		t.Fatalf("the server did not advertise what the test filters: %q", raw)
	}
	if n := len(rec.bodies); n != 0 {
		t.Fatalf("%d push requests reached the server", n)
	}
	// Control: unfiltered, the same push option goes through.
	filter = false
	if _, stderr, err := g.run(client, nil, "push", "-o", "ci.skip", url, "HEAD:refs/heads/agent/t/x"); err != nil {
		t.Fatalf("unfiltered push -o: %v\n%s", err, stderr)
	}
}
