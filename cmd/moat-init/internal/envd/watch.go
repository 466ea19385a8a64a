package envd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"

	fspb "github.com/moatdev/moat/api/envd/filesystem"
	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

// dirWatch watches one directory, and with recursive every directory below
// it, including directories created later.
type dirWatch struct {
	s            *Server
	root         string
	recursive    bool
	includeEntry bool
	cred         linux.Cred
	w            *fsnotify.Watcher
}

// watchOptions is what WatchDir and CreateWatcher have in common.
type watchOptions struct {
	path               string
	recursive          bool
	includeEntry       bool
	allowNetworkMounts bool
}

// newDirWatch starts watching for u. The directory must exist and u must
// be able to read it.
func (s *Server) newDirWatch(u *users.User, o watchOptions) (*dirWatch, error) {
	root, err := resolvePath(o.path, u)
	if err != nil {
		return nil, err
	}
	d := &dirWatch{s: s, root: root, recursive: o.recursive, includeEntry: o.includeEntry, cred: credOf(u)}
	err = linux.RunAs(d.cred, func() error {
		fi, err := os.Stat(root)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return invalidArgument("path %s is not a directory", root)
		}
		if !o.allowNetworkMounts {
			if fsType, err := linux.NetworkFS(root); err == nil && fsType != "" {
				return failedPrecondition("%s is on a %s mount, where watching is unreliable; set allow_network_mounts", root, fsType)
			}
		}
		if d.w, err = fsnotify.NewWatcher(); err != nil {
			return fmt.Errorf("creating watcher: %w", err)
		}
		return d.addTree(root)
	})
	if err != nil {
		if d.w != nil {
			d.w.Close()
		}
		return nil, rpcError(fmt.Errorf("watching %s: %w", root, err))
	}
	return d, nil
}

// addTree watches dir and, when recursive, the directories below it. It
// runs with the user's credentials. Subdirectories that cannot be watched
// are skipped.
func (d *dirWatch) addTree(dir string) error {
	if err := d.w.Add(dir); err != nil {
		return err
	}
	if !d.recursive {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || p == dir || !de.IsDir() {
			return nil
		}
		_ = d.w.Add(p)
		return nil
	})
}

func (d *dirWatch) Close() error { return d.w.Close() }

// events converts one fsnotify event into protocol events, and watches a
// new directory when recursive.
func (d *dirWatch) events(ev fsnotify.Event) []*fspb.FilesystemEvent {
	rel, err := filepath.Rel(d.root, ev.Name)
	if err != nil {
		return nil
	}
	var entry *fspb.EntryInfo
	if d.includeEntry || (d.recursive && ev.Has(fsnotify.Create)) {
		_ = linux.RunAs(d.cred, func() error {
			fi, err := os.Lstat(ev.Name)
			if err != nil {
				return err
			}
			if d.recursive && ev.Has(fsnotify.Create) && fi.IsDir() {
				_ = d.addTree(ev.Name)
			}
			if d.includeEntry {
				entry = d.s.entryInfo(ev.Name, fi)
			}
			return nil
		})
	}
	var out []*fspb.FilesystemEvent
	for _, m := range []struct {
		op fsnotify.Op
		t  fspb.EventType
	}{
		{fsnotify.Create, fspb.EventType_EVENT_TYPE_CREATE},
		{fsnotify.Write, fspb.EventType_EVENT_TYPE_WRITE},
		{fsnotify.Remove, fspb.EventType_EVENT_TYPE_REMOVE},
		{fsnotify.Rename, fspb.EventType_EVENT_TYPE_RENAME},
		{fsnotify.Chmod, fspb.EventType_EVENT_TYPE_CHMOD},
	} {
		if ev.Has(m.op) {
			e := &fspb.FilesystemEvent{Name: rel, Type: m.t}
			if m.op != fsnotify.Remove && m.op != fsnotify.Rename {
				e.Entry = entry
			}
			out = append(out, e)
		}
	}
	return out
}

// WatchDir streams changes below a directory: a start event, then one
// event per change, with keepalives when asked for, until the client
// leaves or its deadline passes.
func (fss *filesystemService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	u, err := fss.s.rpcUser(req.Header())
	if err != nil {
		return err
	}
	m := req.Msg
	d, err := fss.s.newDirWatch(u, watchOptions{
		path: m.GetPath(), recursive: m.GetRecursive(), includeEntry: m.GetIncludeEntry(), allowNetworkMounts: m.GetAllowNetworkMounts(),
	})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	var tick <-chan time.Time
	if iv := keepaliveInterval(req.Header()); iv > 0 {
		t := time.NewTicker(iv)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ev, ok := <-d.w.Events:
			if !ok {
				return connect.NewError(connect.CodeInternal, errors.New("watcher closed"))
			}
			for _, e := range d.events(ev) {
				if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: e}}); err != nil {
					return err
				}
			}
		case err, ok := <-d.w.Errors:
			if !ok {
				return connect.NewError(connect.CodeInternal, errors.New("watcher closed"))
			}
			fss.s.cfg.Log.Warn("watch error", "path", d.root, "err", err)
		case <-tick:
			if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
			}
			return connect.NewError(connect.CodeCanceled, ctx.Err())
		}
	}
}

// Limits of polled watchers.
const (
	maxPolledEvents = 10000
	watcherIdle     = 10 * time.Minute
)

// watcherTable holds the watchers of CreateWatcher, drained by
// GetWatcherEvents. A watcher nobody polls for watcherIdle is removed.
type watcherTable struct {
	mu sync.Mutex
	m  map[string]*polledWatch
}

func newWatcherTable() *watcherTable { return &watcherTable{m: make(map[string]*polledWatch)} }

type polledWatch struct {
	d    *dirWatch
	done chan struct{}

	mu       sync.Mutex
	events   []*fspb.FilesystemEvent
	dropped  int
	lastPoll time.Time
}

func (p *polledWatch) run() {
	for {
		select {
		case ev, ok := <-p.d.w.Events:
			if !ok {
				return
			}
			evs := p.d.events(ev)
			p.mu.Lock()
			for _, e := range evs {
				if len(p.events) >= maxPolledEvents {
					p.dropped++
					continue
				}
				p.events = append(p.events, e)
			}
			p.mu.Unlock()
		case _, ok := <-p.d.w.Errors:
			if !ok {
				return
			}
		case <-p.done:
			return
		}
	}
}

func (p *polledWatch) stop() {
	close(p.done)
	p.d.Close()
}

// CreateWatcher starts a watcher whose events are collected until polled.
func (fss *filesystemService) CreateWatcher(_ context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	u, err := fss.s.rpcUser(req.Header())
	if err != nil {
		return nil, err
	}
	m := req.Msg
	d, err := fss.s.newDirWatch(u, watchOptions{
		path: m.GetPath(), recursive: m.GetRecursive(), includeEntry: m.GetIncludeEntry(), allowNetworkMounts: m.GetAllowNetworkMounts(),
	})
	if err != nil {
		return nil, err
	}
	var idb [12]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	pw := &polledWatch{d: d, done: make(chan struct{}), lastPoll: time.Now()}
	go pw.run()

	t := fss.s.watchers
	t.mu.Lock()
	for oid, o := range t.m {
		o.mu.Lock()
		idle := time.Since(o.lastPoll) > watcherIdle
		o.mu.Unlock()
		if idle {
			delete(t.m, oid)
			o.stop()
		}
	}
	t.m[id] = pw
	t.mu.Unlock()
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns and forgets the events collected since the last
// call.
func (fss *filesystemService) GetWatcherEvents(_ context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	t := fss.s.watchers
	t.mu.Lock()
	pw := t.m[req.Msg.GetWatcherId()]
	t.mu.Unlock()
	if pw == nil {
		return nil, notFound("watcher %q not found", req.Msg.GetWatcherId())
	}
	pw.mu.Lock()
	evs := pw.events
	pw.events = nil
	if pw.dropped > 0 {
		fss.s.cfg.Log.Warn("watcher dropped events", "watcher", req.Msg.GetWatcherId(), "dropped", pw.dropped)
		pw.dropped = 0
	}
	pw.lastPoll = time.Now()
	pw.mu.Unlock()
	return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: evs}), nil
}

// RemoveWatcher stops a watcher.
func (fss *filesystemService) RemoveWatcher(_ context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	t := fss.s.watchers
	t.mu.Lock()
	pw := t.m[req.Msg.GetWatcherId()]
	delete(t.m, req.Msg.GetWatcherId())
	t.mu.Unlock()
	if pw == nil {
		return nil, notFound("watcher %q not found", req.Msg.GetWatcherId())
	}
	pw.stop()
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}
