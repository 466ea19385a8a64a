// Package storage owns moat's templates, layers and drives (see docs/internals.md).
//
// Layout under the data directory (every directory 0700, root only):
//
//	templates/<name>.json   template manifest
//	layers/<id>/            immutable layer trees; a layer exists under its final name only
//	                        once complete (built under layers/.tmp-*, then renamed)
//	drives/<id>.img         a sandbox's drive: ext4 image, size = its disk limit, allocated
//	                        in full unless the daemon overcommits (DiskPolicy)
//
// Names and IDs that come from users or sandboxes are validated against strict patterns
// before they become path components, and files are opened through os.Root, so no input can
// reach outside these directories. Layer trees written from untrusted archives are never
// followed through symbolic links.
package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
)

var _ sandbox.Storage = (*Store)(nil)

// Store implements sandbox.Storage on a local data directory. It is safe for concurrent use.
type Store struct {
	dir    string // absolute data directory
	runDir string // absolute run directory; sandbox mounts live in runDir/sandboxes/<id>
	log    *slog.Logger

	templates *os.Root // dir/templates
	layers    *os.Root // dir/layers
	drives    *os.Root // dir/drives

	// hostRoot is the filesystem the host template is made from ("/"; tests use a fake).
	hostRoot string

	// loops mounts drives; one for all of this Store's concurrent mounts.
	loops *linux.Loops

	mu       sync.Mutex
	building map[string]bool // names in layers/ and templates/ being written right now
	hostTmpl *sandbox.Template
	staged   map[string]sandbox.Template // build sandboxes' templates (build.go)

	hostMu sync.Mutex // serializes building the host layer
	locks  keyedMutex // one build per repository layer, one drive format at a time

	policy DiskPolicy // how drives take the data filesystem's space (capacity.go)

	// Snapshots (snapshot.go): whether drives/ clones (nil: not probed yet), and whether
	// this store mounted the drive pool there.
	reflink *bool
	pool    bool
	hook    func(point string) // failpoint of tests (SetHook); nil: none
}

// New opens (creating if needed) the storage under dataDir. runDir is the daemon's run
// directory: Mount and Unmount only act on targets inside runDir/sandboxes/<id>/ (when
// runDir is empty, anywhere). New does not build anything; the host template's layer is
// made on first use (well under a second) and found again by later processes.
func New(dataDir, runDir string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	if runDir != "" {
		if runDir, err = filepath.Abs(runDir); err != nil {
			return nil, err
		}
	}
	s := &Store{dir: dir, runDir: runDir, log: log, hostRoot: "/", building: map[string]bool{}, loops: linux.NewLoops()}
	for _, sub := range []struct {
		name string
		root **os.Root
	}{{"templates", &s.templates}, {"layers", &s.layers}, {"drives", &s.drives}} {
		p := filepath.Join(dir, sub.name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, fmt.Errorf("creating %s: %w", p, err)
		}
		// Layers keep their set-id programs and file capabilities (sudo inside runc
		// sandboxes needs them), and a runsc sandbox's drive holds files of host root:
		// closed to every other host account, also when the directory existed before.
		if err := os.Chmod(p, 0o700); err != nil {
			return nil, fmt.Errorf("closing %s: %w", p, err)
		}
		if *sub.root, err = os.OpenRoot(p); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// SetDiskPolicy sets how drives take the data filesystem's space (DiskPolicy; the zero
// value reserves every drive in full and keeps DefaultReserve free). Call it before the
// store is used.
func (s *Store) SetDiskPolicy(p DiskPolicy) { s.policy = p }

// Close releases the store's directory handles. Mounts are left alone.
func (s *Store) Close() error {
	for _, r := range []*os.Root{s.templates, s.layers, s.drives} {
		if r != nil {
			r.Close()
		}
	}
	s.closePool()
	return nil
}

func (s *Store) layerPath(id string) string { return filepath.Join(s.dir, "layers", id) }
func (s *Store) drivePath(id string) string { return filepath.Join(s.dir, "drives", id+".img") }

var (
	layerIDRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,159}$`)
	sandboxIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
)

func validSandboxID(id string) error {
	if !sandboxIDRE.MatchString(id) {
		return fmt.Errorf("sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

func validLayerID(id string) error {
	if !layerIDRE.MatchString(id) || strings.Contains(id, "..") {
		return fmt.Errorf("layer id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// tmpPrefix marks half-written entries in layers/, templates/ and drives/.
const tmpPrefix = ".tmp-"

// newTemp creates an empty directory layers/.tmp-<kind>-<random> (0700), marks it as being
// built (so Cleanup leaves it alone) and returns its name and absolute path. done unmarks it
// and removes whatever is left at that name.
func (s *Store) newTemp(kind string) (name, path string, done func(), err error) {
	name = tmpPrefix + kind + "-" + randHex(8)
	s.mu.Lock()
	s.building[name] = true
	s.mu.Unlock()
	if err := s.layers.Mkdir(name, 0o700); err != nil {
		s.unmark(name)
		return "", "", nil, err
	}
	path = s.layerPath(name)
	return name, path, func() {
		if err := s.removeLayerDir(name); err != nil {
			s.log.Warn("removing temporary layer", "path", path, "err", err)
		}
		s.unmark(name)
	}, nil
}

func (s *Store) mark(name string) {
	s.mu.Lock()
	s.building[name] = true
	s.mu.Unlock()
}

func (s *Store) unmark(name string) {
	s.mu.Lock()
	delete(s.building, name)
	s.mu.Unlock()
}

func (s *Store) isBuilding(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.building[name]
}

// commitLayer makes the finished temporary layer tmp durable and renames it to id. If id already exists (another
// build of the same content won), the existing one is kept. The temporary is gone afterwards
// either way.
func (s *Store) commitLayer(tmp, id string) error {
	if err := s.layers.Chmod(tmp, 0o755); err != nil {
		return err
	}
	// The final name promises a complete tree, also after a crash.
	if err := linux.SyncFS(s.layerPath(tmp)); err != nil {
		return err
	}
	err := s.layers.Rename(tmp, id)
	if err == nil {
		return nil
	}
	if _, serr := s.layers.Lstat(id); serr == nil {
		return nil // already there
	}
	return fmt.Errorf("committing layer %s: %w", id, err)
}

// removeLayerDir deletes layers/<name> after making sure nothing is mounted inside it (a
// crashed debootstrap can leave /proc mounted in its target).
func (s *Store) removeLayerDir(name string) error {
	p := s.layerPath(name)
	if _, err := s.layers.Lstat(name); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := linux.UnmountAll(p); err != nil {
		return fmt.Errorf("unmounting inside %s: %w", p, err)
	}
	return s.layers.RemoveAll(name)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// keyedMutex is a set of mutexes by key, created on demand.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

// lock takes the mutex for key, honouring ctx while waiting, and returns its unlock.
func (k *keyedMutex) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
	got := make(chan struct{})
	go func() { e.mu.Lock(); close(got) }()
	select {
	case <-got:
		return func() { e.mu.Unlock(); release() }, nil
	case <-ctx.Done():
		go func() { <-got; e.mu.Unlock(); release() }()
		return nil, ctx.Err()
	}
}
