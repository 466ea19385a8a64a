package main

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/moatdev/moat/api/envd/filesystem"
)

// ownedBy asserts path's owner uid.
func ownedBy(t *testing.T, path string, uid int) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Sys().(*syscall.Stat_t).Uid; int(got) != uid {
		t.Errorf("%s is owned by uid %d, want %d", path, got, uid)
	}
}

// scratch returns a fresh directory under the test user's home, owned by
// that user, and its path relative to the home.
func scratch(t *testing.T) (abs, rel string) {
	t.Helper()
	rel = "fs-" + strings.ReplaceAll(t.Name(), "/", "-")
	abs = filepath.Join(testUser.home, rel)
	if err := os.RemoveAll(abs); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(abs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(abs, testUser.uid, testUser.gid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(abs) })
	return abs, rel
}

func TestFilesystemRPCs(t *testing.T) {
	in := sharedInstance(t)
	fs := in.filesystem()
	ctx := context.Background()
	dir, rel := scratch(t)

	// MakeDir with a relative path, creating parents owned by the user.
	md, err := fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: rel + "/a/b"}))
	if err != nil {
		t.Fatal(err)
	}
	e := md.Msg.GetEntry()
	if e.GetPath() != dir+"/a/b" || e.GetName() != "b" || e.GetType() != fspb.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("MakeDir entry %v", e)
	}
	if e.GetOwner() != testUser.name || e.GetPermissions() != "drwxr-xr-x" || e.GetMode() != 0o755 {
		t.Errorf("MakeDir entry owner %q permissions %q mode %o", e.GetOwner(), e.GetPermissions(), e.GetMode())
	}
	ownedBy(t, dir+"/a", testUser.uid)
	ownedBy(t, dir+"/a/b", testUser.uid)

	_, err = fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: dir + "/a/b"}))
	wantCode(t, err, connect.CodeAlreadyExists)

	if err := os.WriteFile(dir+"/a/file.txt", []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("file.txt", dir+"/a/link"); err != nil {
		t.Fatal(err)
	}

	// Stat of a file, a symlink, a missing path.
	st, err := fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: dir + "/a/file.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	e = st.Msg.GetEntry()
	if e.GetType() != fspb.FileType_FILE_TYPE_FILE || e.GetSize() != 5 || e.GetPermissions() != "-rw-r-----" ||
		e.GetOwner() != "root" || e.GetGroup() != "root" || e.GetMode() != 0o640 {
		t.Errorf("Stat file: %v", e)
	}
	if mt := e.GetModifiedTime().AsTime(); time.Since(mt) > time.Minute {
		t.Errorf("modified time %v", mt)
	}
	st, err = fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: dir + "/a/link"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := st.Msg.GetEntry(); e.GetType() != fspb.FileType_FILE_TYPE_SYMLINK || e.GetSymlinkTarget() != dir+"/a/file.txt" { // absolute, as E2B reports it
		t.Errorf("Stat symlink: %v", e)
	}
	_, err = fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: dir + "/missing"}))
	wantCode(t, err, connect.CodeNotFound)

	// ".." is resolved lexically against the home directory.
	st, err = fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: rel + "/a/b/../file.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Msg.GetEntry().GetPath(); got != dir+"/a/file.txt" {
		t.Errorf("Stat of a path with ..: %q", got)
	}
	st, err = fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "../../../../" + testUser.home}))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Msg.GetEntry().GetPath(); got != testUser.home {
		t.Errorf("Stat of ../../../..%s: %q", testUser.home, got)
	}

	// ListDir at depth 1 and 2.
	names := func(entries []*fspb.EntryInfo) string {
		var out []string
		for _, e := range entries {
			out = append(out, strings.TrimPrefix(e.GetPath(), dir+"/"))
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	ls, err := fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(ls.Msg.GetEntries()); got != "a" {
		t.Errorf("ListDir depth 1: %s", got)
	}
	ls, err = fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: dir, Depth: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(ls.Msg.GetEntries()); got != "a,a/b,a/file.txt,a/link" {
		t.Errorf("ListDir depth 2: %s", got)
	}
	_, err = fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: dir + "/a/file.txt"}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: dir + "/nope"}))
	wantCode(t, err, connect.CodeNotFound)

	// Move creates the destination's parents.
	mv, err := fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: dir + "/a/file.txt", Destination: rel + "/c/d/moved.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := mv.Msg.GetEntry().GetPath(); got != dir+"/c/d/moved.txt" {
		t.Errorf("Move entry %q", got)
	}
	if b, err := os.ReadFile(dir + "/c/d/moved.txt"); err != nil || string(b) != "hello" {
		t.Errorf("moved file: %q, %v", b, err)
	}
	ownedBy(t, dir+"/c", testUser.uid)
	_, err = fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: dir + "/nope", Destination: dir + "/x"}))
	wantCode(t, err, connect.CodeNotFound)

	// Remove a tree; removing a missing path is not an error.
	if _, err := fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: dir + "/c"})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/c"); !os.IsNotExist(err) {
		t.Errorf("after Remove: %v", err)
	}
	if _, err := fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: dir + "/c"})); err != nil {
		t.Errorf("Remove of a missing path: %v", err)
	}
}

func TestFilesystemPermissions(t *testing.T) {
	in := sharedInstance(t)
	ctx := context.Background()
	fs := in.filesystem() // the unprivileged test user

	_, err := fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/root/moat-test-denied"}))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/root"}))
	wantCode(t, err, connect.CodePermissionDenied)

	// A root-owned file in the user's home can be read but not removed
	// from a root-owned directory.
	dir, _ := scratch(t)
	locked := filepath.Join(dir, "locked")
	if err := os.Mkdir(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(locked+"/f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: locked + "/f"}))
	wantCode(t, err, connect.CodePermissionDenied)
	if _, err := fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: locked + "/f"})); err != nil {
		t.Errorf("Stat of a readable file: %v", err)
	}

	// Root may do it.
	root := in.filesystem(asUser("root"))
	if _, err := root.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: locked + "/f"})); err != nil {
		t.Errorf("Remove as root: %v", err)
	}
	md, err := root.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: dir + "/rootdir"}))
	if err != nil {
		t.Fatal(err)
	}
	if md.Msg.GetEntry().GetOwner() != "root" {
		t.Errorf("root's directory owned by %q", md.Msg.GetEntry().GetOwner())
	}
	// Relative paths resolve against root's home.
	st, err := root.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: ""}))
	if err != nil || st.Msg.GetEntry().GetPath() != "/root" {
		t.Errorf("Stat of \"\" as root: %v, %v", st, err)
	}
}

// statEntry stats path over the filesystem service as the default user.
func statEntry(t *testing.T, in *instance, path string) *fspb.EntryInfo {
	t.Helper()
	st, err := in.filesystem().Stat(context.Background(), connect.NewRequest(&fspb.StatRequest{Path: path}))
	if err != nil {
		t.Fatal(err)
	}
	return st.Msg.GetEntry()
}

// watchEvent is a FilesystemEvent in short.
type watchEvent struct {
	name string
	typ  fspb.EventType
}

func TestWatchDirRecursive(t *testing.T) {
	in := sharedInstance(t)
	dir, rel := scratch(t)
	if err := os.Mkdir(dir+"/old", 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := in.filesystem(withHeader("Keepalive-Ping-Interval", "1")).WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{
		Path: rel, Recursive: true, IncludeEntry: true,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() || s.Msg().GetStart() == nil {
		t.Fatalf("first event %v, err %v", s.Msg(), s.Err())
	}
	events := make(chan *fspb.WatchDirResponse, 100)
	go func() {
		for s.Receive() {
			events <- s.Msg()
		}
		close(events)
	}()
	var seen []watchEvent
	keepalives := 0
	wait := func(want watchEvent) *fspb.FilesystemEvent {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("stream ended: %v; seen %v", s.Err(), seen)
				}
				if ev.GetKeepalive() != nil {
					keepalives++
					continue
				}
				fe := ev.GetFilesystem()
				got := watchEvent{fe.GetName(), fe.GetType()}
				seen = append(seen, got)
				if got == want {
					return fe
				}
			case <-deadline:
				t.Fatalf("no %v event; seen %v", want, seen)
			}
		}
	}

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(dir+"/top.txt", []byte("x"), 0o644))
	fe := wait(watchEvent{"top.txt", fspb.EventType_EVENT_TYPE_CREATE})
	if fe.GetEntry().GetPath() != dir+"/top.txt" {
		t.Errorf("create event entry %v", fe.GetEntry())
	}
	wait(watchEvent{"top.txt", fspb.EventType_EVENT_TYPE_WRITE})

	must(os.WriteFile(dir+"/old/inner.txt", nil, 0o644))
	wait(watchEvent{"old/inner.txt", fspb.EventType_EVENT_TYPE_CREATE})

	// A directory created after the watch started is watched too.
	must(os.Mkdir(dir+"/new", 0o755))
	wait(watchEvent{"new", fspb.EventType_EVENT_TYPE_CREATE})
	must(os.WriteFile(dir+"/new/deep.txt", nil, 0o644))
	wait(watchEvent{"new/deep.txt", fspb.EventType_EVENT_TYPE_CREATE})

	must(os.Chmod(dir+"/top.txt", 0o600))
	wait(watchEvent{"top.txt", fspb.EventType_EVENT_TYPE_CHMOD})
	must(os.Rename(dir+"/top.txt", dir+"/renamed.txt"))
	wait(watchEvent{"top.txt", fspb.EventType_EVENT_TYPE_RENAME})
	must(os.Remove(dir + "/renamed.txt"))
	fe = wait(watchEvent{"renamed.txt", fspb.EventType_EVENT_TYPE_REMOVE})
	if fe.Entry != nil {
		t.Errorf("remove event carries entry %v", fe.Entry)
	}

	time.Sleep(1200 * time.Millisecond)
	for len(events) > 0 {
		if (<-events).GetKeepalive() != nil {
			keepalives++
		}
	}
	if keepalives == 0 {
		t.Error("no keepalive events")
	}
}

func TestWatchDirErrors(t *testing.T) {
	in := sharedInstance(t)
	dir, _ := scratch(t)
	if err := os.WriteFile(dir+"/f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for path, code := range map[string]connect.Code{
		dir + "/missing": connect.CodeNotFound,
		dir + "/f":       connect.CodeInvalidArgument,
	} {
		s, err := in.filesystem().WatchDir(context.Background(), connect.NewRequest(&fspb.WatchDirRequest{Path: path}))
		if err == nil {
			for s.Receive() {
			}
			err = s.Err()
		}
		wantCode(t, err, code)
	}
}

func TestPolledWatcher(t *testing.T) {
	in := sharedInstance(t)
	fs := in.filesystem()
	ctx := context.Background()
	dir, _ := scratch(t)
	cw, err := fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.GetWatcherId()
	if id == "" {
		t.Fatal("empty watcher id")
	}
	if err := os.WriteFile(dir+"/p.txt", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var got []watchEvent
	waitFor(t, 10*time.Second, "polled create event", func() bool {
		ev, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ev.Msg.GetEvents() {
			got = append(got, watchEvent{e.GetName(), e.GetType()})
		}
		return len(got) > 0
	})
	if got[0] != (watchEvent{"p.txt", fspb.EventType_EVENT_TYPE_CREATE}) {
		t.Errorf("events %v", got)
	}
	if _, err := fs.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound)
}
