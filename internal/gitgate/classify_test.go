package gitgate

import (
	"net/url"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		method, url string
		want        Service
		repo        string
		err         bool
	}{
		{"GET", "/o/r.git/info/refs?service=git-receive-pack", PushAdvertisement, "/o/r.git", false},
		{"HEAD", "/o/r.git/info/refs?service=git-receive-pack", PushAdvertisement, "/o/r.git", false},
		{"POST", "/o/r.git/git-receive-pack", Push, "/o/r.git", false},
		{"POST", "/o/r/git-receive-pack", Push, "/o/r", false},
		{"GET", "/o/r.git/info/refs?service=git-upload-pack", FetchAdvertisement, "/o/r.git", false},
		{"POST", "/o/r.git/git-upload-pack", Fetch, "/o/r.git", false},
		{"GET", "/o/r.git/info/refs", Other, "/o/r.git", false},
		{"GET", "/o/r.git/HEAD", Other, "", false},
		{"GET", "/o/r", Other, "", false},
		{"PUT", "/repos/o/r/issues/1", Other, "", false},
		{"GET", "/repos/o/r/branches/agent%2Ft%2Fx", Other, "", false},
		{"GET", "/o/r/blob/main/a/../b;x", Other, "", false},
		// Other spellings of a push are pushes (or refused), never something else.
		{"POST", "/o/r.git/GIT-RECEIVE-PACK", Push, "/o/r.git", false},
		{"POST", "/o/r.git/git-receive-pack/", Push, "/o/r.git", false},
		{"POST", "/o/r.git/git-receive-pack/x", Push, "/o/r.git", false},
		{"POST", "/o/r.git/git-receive-pack?service=git-upload-pack", Push, "/o/r.git", false},
		{"GET", "/o/r.git/INFO/REFS?SERVICE=GIT-RECEIVE-PACK", PushAdvertisement, "/o/r.git", false},
		{"get", "/o/r.git/info/refs?service=git-receive-pack", PushAdvertisement, "/o/r.git", false},
		{"GET", "/o/r.git/git-receive-pack", 0, "", true},
		{"PUT", "/o/r.git/git-receive-pack", 0, "", true},
		{"POST", "/o/r.git/info/refs?service=git-receive-pack", 0, "", true},
		{"POST", "/o/r.git/git-%72eceive-pack", 0, "", true},
		{"POST", "/o/r.git/git-receive-pack%00", 0, "", true},
		{"GET", "/o/r.git/info/refs?service=git-upload-pack&service=git-receive-pack", 0, "", true},
		{"GET", "/o/r.git/info/refs?service=git-upload-pack&Service=git-receive-pack", 0, "", true},
		{"GET", "/o/r.git/info/refs?service=git-upload-archive", 0, "", true},
		{"GET", "/o/r.git/info/refs?service=%zz", 0, "", true},
		{"GET", "/o/r.git/other?service=git-receive-pack", 0, "", true},
		{"POST", `/o/r.git\git-receive-pack`, 0, "", true},
		{"POST", "/o/r.git/git-receive-pack;jsessionid=1", 0, "", true},
		{"POST", "/o/r.git/x/../git-receive-pack", 0, "", true},
		{"GET", "/o/r.git/info/refs/.?service=git-upload-pack", 0, "", true},
		{"GET", "/o/r.git/./info/refs?service=git-receive-pack", 0, "", true},
		// git http-push (WebDAV) writes refs and objects directly.
		{"PUT", "/o/r.git/objects/ab/cdef", 0, "", true},
		{"MKCOL", "/o/r.git/objects/ab/", 0, "", true},
		{"MOVE", "/o/r.git/refs/heads/main", 0, "", true},
		{"LOCK", "/o/r.git/info/refs", 0, "", true},
		{"PATCH", "/repos/o/r/git/refs/heads/main", 0, "", true},
		{"BREW", "/", 0, "", true},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		s, repo, err := Classify(tc.method, u)
		if tc.err {
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("%s %s: %v %q %v, want ErrInvalidArgument", tc.method, tc.url, s, repo, err)
			}
			continue
		}
		if err != nil || s != tc.want || repo != tc.repo {
			t.Errorf("%s %s: %v %q %v, want %v %q", tc.method, tc.url, s, repo, err, tc.want, tc.repo)
		}
	}
}

func FuzzClassify(f *testing.F) {
	f.Add("POST", "/o/r.git/git-receive-pack")
	f.Add("GET", "/o/r.git/info/refs?service=git-receive-pack")
	f.Add("GET", "/o/r.git/info/refs?service=git-upload-pack")
	f.Fuzz(func(t *testing.T, method, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		s, _, err := Classify(method, u)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("error of no class: %v", err)
			}
			return
		}
		lower := strings.ToLower(u.Path)
		if strings.Contains("/"+lower+"/", "/git-receive-pack/") && s != Push {
			t.Fatalf("%s %q names git-receive-pack but is %v", method, raw, s)
		}
		if s == Push && !strings.EqualFold(method, "POST") {
			t.Fatalf("push by %s", method)
		}
		q, _ := url.ParseQuery(u.RawQuery)
		for k, vs := range q {
			for _, v := range vs {
				if strings.EqualFold(k, "service") && strings.EqualFold(v, "git-receive-pack") && s != Push && s != PushAdvertisement {
					t.Fatalf("%s %q asks for receive-pack, classified %v", method, raw, s)
				}
			}
		}
	})
}
