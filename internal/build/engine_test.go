package build

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// fakeBackend records steps; its layers are the keys it built.
type fakeBackend struct {
	layers  map[string]bool
	built   []string
	ran     [][]string
	commits []Image
}

func (f *fakeBackend) Base(ctx context.Context, from string, progress func(string)) (Base, error) {
	b := Base{Name: from, Identity: "id:" + from, Env: []string{"PATH=/bin"}}
	if from == "userbase" {
		b.User, b.Labels, b.Cmd = "node", map[string]string{"a": "1"}, []string{"npm", "start"}
	}
	return b, nil
}
func (f *fakeBackend) Cached(ctx context.Context, _ Base, _ []string, key string) bool {
	return f.layers[key]
}
func (f *fakeBackend) Step(ctx context.Context, _ Base, keys []string, key string, fn func(context.Context, Sandbox) error) error {
	if err := fn(ctx, fakeSandbox{f}); err != nil {
		return err
	}
	f.layers[key] = true
	f.built = append(f.built, key)
	return nil
}
func (f *fakeBackend) Commit(ctx context.Context, name string, _ Base, keys []string, img Image) error {
	f.commits = append(f.commits, img)
	return nil
}
func (f *fakeBackend) Close() {}

type fakeSandbox struct{ f *fakeBackend }

func (s fakeSandbox) Exec(ctx context.Context, e Exec) (int, error) {
	s.f.ran = append(s.f.ran, append([]string{e.User, e.Workdir, fmt.Sprint(e.Env["GREETING"])}, e.Argv...))
	return 0, nil
}
func (s fakeSandbox) Root(ctx context.Context, fn func(root *os.Root, hostID func(int) int) error) error {
	return nil // the fake has no files
}

func build(t *testing.T, be *fakeBackend, df string, cx fstest.MapFS) *Report {
	t.Helper()
	d, err := ParseDockerfile([]byte(df))
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Name: "t", From: d.From, Steps: d.Steps}
	if cx != nil {
		req.Context = cx
	}
	rep, err := Build(context.Background(), be, req)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestBuildCacheKeys: an edit of the last step reuses every layer before it; an edit of
// an ENV before a RUN, or of a copied file's content, rebuilds from there on.
func TestBuildCacheKeys(t *testing.T) {
	const df = "FROM host\nENV GREETING=hi\nRUN one\nCOPY f /f\nRUN two\n"
	cx := fstest.MapFS{"f": {Data: []byte("v1"), Mode: 0o644}}
	be := &fakeBackend{layers: map[string]bool{}}
	r1 := build(t, be, df, cx)
	if r1.Built != 3 || r1.Cached != 0 {
		t.Fatalf("first: %+v", r1)
	}
	keys := func(r *Report) []string {
		var k []string
		for _, s := range r.Steps {
			if s.Key != "" {
				k = append(k, s.Key)
			}
		}
		return k
	}
	k1 := keys(r1)

	r2 := build(t, be, strings.Replace(df, "RUN two", "RUN three", 1), cx)
	k2 := keys(r2)
	if r2.Built != 1 || r2.Cached != 2 || !slices.Equal(k1[:2], k2[:2]) || k1[2] == k2[2] {
		t.Errorf("last step edited: %+v", r2)
	}
	r3 := build(t, be, df, fstest.MapFS{"f": {Data: []byte("v2"), Mode: 0o644}})
	k3 := keys(r3)
	if r3.Built != 2 || k3[0] != k1[0] || k3[1] == k1[1] || k3[2] == k1[2] {
		t.Errorf("copied content changed: %+v", r3)
	}
	r4 := build(t, be, strings.Replace(df, "GREETING=hi", "GREETING=ho", 1), cx)
	if r4.Built != 3 || r4.Cached != 0 {
		t.Errorf("ENV before the RUNs changed: %+v", r4)
	}
	r5 := build(t, be, strings.Replace(df, "FROM host", "FROM other", 1), cx)
	if r5.Built != 3 {
		t.Errorf("another base: %+v", r5)
	}
}

// TestBuildState: RUN gets the ENV so far, runs as root until USER, in WORKDIR; the commit
// records ENV, USER and WORKDIR.
func TestBuildState(t *testing.T) {
	be := &fakeBackend{layers: map[string]bool{}}
	build(t, be, "FROM host\nARG N=x\nENV GREETING=hi-$N\nRUN a\nWORKDIR /w\nUSER user\nRUN [\"b\", \"c\"]\nWORKDIR sub\n", nil)
	want := [][]string{{"root", "/", "hi-x", "/bin/sh", "-c", "a"}, {"user", "/w", "hi-x", "b", "c"}}
	if !slices.EqualFunc(be.ran, want, slices.Equal) {
		t.Errorf("ran %q, want %q", be.ran, want)
	}
	img := be.commits[0]
	if img.User != "user" || img.Workdir != "/w/sub" || !slices.Equal(img.Env, []string{"PATH=/bin", "GREETING=hi-x"}) {
		t.Errorf("image %+v", img)
	}
}

// TestBuildCopyNeedsContext: COPY without a context, or of a missing file, fails before
// any sandbox starts.
func TestBuildCopyNeedsContext(t *testing.T) {
	for _, c := range []struct {
		cx   fstest.MapFS
		want string
	}{{nil, "needs a build context"}, {fstest.MapFS{}, "COPY source f"}} {
		be := &fakeBackend{layers: map[string]bool{}}
		d, _ := ParseDockerfile([]byte("FROM host\nCOPY f /f\n"))
		req := Request{Name: "t", From: d.From, Steps: d.Steps}
		if c.cx != nil {
			req.Context = c.cx
		}
		_, err := Build(context.Background(), be, req)
		if err == nil || !strings.Contains(err.Error(), c.want) || len(be.built) != 0 {
			t.Errorf("got %v (built %v), want %q", err, be.built, c.want)
		}
	}
}

// TestBuildFromBaseConfig: RUN runs as the base's user; its labels and CMD carry over
// unless the Dockerfile sets them.
func TestBuildFromBaseConfig(t *testing.T) {
	be := &fakeBackend{layers: map[string]bool{}}
	build(t, be, "FROM userbase\nRUN a\nLABEL b=2\n", nil)
	if be.ran[0][0] != "node" {
		t.Errorf("RUN ran as %q, want the base's user", be.ran[0][0])
	}
	img := be.commits[0]
	if img.User != "node" || img.Labels["a"] != "1" || img.Labels["b"] != "2" || !slices.Equal(img.Cmd, []string{"npm", "start"}) {
		t.Errorf("image %+v", img)
	}
}
