package safegit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Options bound what a quarantine accepts and produces. Zero fields take the defaults.
type Options struct {
	Logger        *slog.Logger
	MaxPackBytes  int64         // one pack from the sandbox; default 512 MiB
	MaxObjects    uint32        // objects in one pack; default 1,000,000
	MaxOutput     int64         // output of one git command (log, diff); default 16 MiB
	MaxPatchBytes int64         // Patch; default 32 MiB
	MaxCommits    int           // commits listed in a report; default 1000
	MaxFiles      int           // files listed in a report; default 10000
	Timeout       time.Duration // one git command; default 5 min

	MaxSnapshotBytes int64 // CommitSnapshot: total file bytes; default 1 GiB
	MaxSnapshotFiles int   // CommitSnapshot: files; default 200,000
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxPackBytes, 512<<20)
	def(&o.MaxOutput, DefaultMaxOutput)
	def(&o.MaxPatchBytes, 32<<20)
	def(&o.MaxSnapshotBytes, 1<<30)
	if o.MaxObjects == 0 {
		o.MaxObjects = 1_000_000
	}
	if o.MaxCommits <= 0 {
		o.MaxCommits = 1000
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = 10000
	}
	if o.MaxSnapshotFiles <= 0 {
		o.MaxSnapshotFiles = 200_000
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// quarantineConfig is the whole config file of a quarantine repository. moat writes it at
// Create, makes it read-only, and Open refuses a quarantine whose config differs. It has no
// include, no hooks path but /dev/null, no filters, drivers or helpers.
const quarantineConfig = `[core]
	repositoryformatversion = 0
	filemode = true
	bare = true
	hooksPath = /dev/null
	fsmonitor = false
	logAllRefUpdates = false
[transfer]
	fsckObjects = true
[receive]
	fsckObjects = true
[gc]
	auto = 0
[uploadpack]
	allowAnySHA1InWant = true
`

// Quarantine is a bare repository, per sandbox and remote, that holds the objects a sandbox
// pushed (and the bases they need) until moat has looked at them. Its directory is moat's
// (0700, owned by the daemon's user); the sandbox never sees it. Safe for concurrent reads;
// writes (ReceivePack, FetchPath, CommitSnapshot) are serialised by git's own locking.
type Quarantine struct {
	dir    string // the quarantine directory
	gitDir string // dir/repo.git
	r      *Runner
	opt    Options
	log    *slog.Logger
}

// Dir returns the quarantine directory of a sandbox and remote under root: one directory
// per sandbox, one repository per remote URL (hashed, so any URL is a safe name).
func Dir(root, sandboxID, remoteURL string) (string, error) {
	if sandboxID == "" || strings.ContainsAny(sandboxID, "/\\\x00") || sandboxID == "." || sandboxID == ".." {
		return "", fmt.Errorf("quarantine for sandbox %q: %w", sandboxID, errdefs.ErrInvalidArgument)
	}
	sum := sha256.Sum256([]byte(remoteURL))
	return filepath.Join(root, sandboxID, hex.EncodeToString(sum[:16])), nil
}

// Create makes a new quarantine in dir, which must not exist (its parent must). The
// directory is 0700; the repository is created with no templates (so no sample hooks) and
// then given moat's config, read-only.
func Create(ctx context.Context, dir string, opt Options) (*Quarantine, error) {
	opt = opt.withDefaults()
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("quarantine %q: not absolute: %w", dir, errdefs.ErrInvalidArgument)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("quarantine %s: %w", dir, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("quarantine %s: %w", dir, err)
	}
	q, err := newQuarantine(dir, opt)
	if err != nil {
		return nil, err
	}
	if _, err := q.r.run(ctx, invocation{args: []string{"init", "--bare", "--quiet", "--template=", q.gitDir}, timeout: opt.Timeout}); err != nil {
		return nil, fmt.Errorf("quarantine %s: %w", dir, err)
	}
	cfg := filepath.Join(q.gitDir, "config")
	if err := os.Remove(cfg); err != nil {
		return nil, fmt.Errorf("quarantine %s: %w", dir, err)
	}
	if err := os.WriteFile(cfg, []byte(quarantineConfig), 0o400); err != nil {
		return nil, fmt.Errorf("quarantine %s: %w", dir, err)
	}
	if err := q.check(); err != nil {
		return nil, err
	}
	return q, nil
}

// Open opens a quarantine made by Create. It refuses one whose directory is not the
// daemon's and private, or whose config is not exactly moat's.
func Open(dir string, opt Options) (*Quarantine, error) {
	q, err := newQuarantine(dir, opt.withDefaults())
	if err != nil {
		return nil, err
	}
	return q, q.check()
}

func newQuarantine(dir string, opt Options) (*Quarantine, error) {
	r, err := NewRunner(opt.Logger, filepath.Join(dir, "home"))
	if err != nil {
		return nil, fmt.Errorf("quarantine %s: %w", dir, err)
	}
	return &Quarantine{dir: dir, gitDir: filepath.Join(dir, "repo.git"), r: r, opt: opt, log: opt.Logger}, nil
}

// check verifies ownership and modes of the quarantine and the bytes of its config.
func (q *Quarantine) check() error {
	for _, p := range []string{q.dir, q.gitDir} {
		st, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("quarantine %s: %w", q.dir, err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !st.IsDir() || !ok || int(sys.Uid) != os.Geteuid() || st.Mode().Perm()&0o077 != 0 && p == q.dir {
			return fmt.Errorf("quarantine %s: %s is not a private directory of uid %d: %w", q.dir, p, os.Geteuid(), errdefs.ErrPermissionDenied)
		}
	}
	cfg := filepath.Join(q.gitDir, "config")
	st, err := os.Lstat(cfg)
	if err != nil {
		return fmt.Errorf("quarantine %s: %w", q.dir, err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o222 != 0 {
		return fmt.Errorf("quarantine %s: config is not a read-only file: %w", q.dir, errdefs.ErrPermissionDenied)
	}
	b, err := os.ReadFile(cfg)
	if err != nil {
		return fmt.Errorf("quarantine %s: %w", q.dir, err)
	}
	if string(b) != quarantineConfig {
		return fmt.Errorf("quarantine %s: config is not moat's: %w", q.dir, errdefs.ErrPermissionDenied)
	}
	return nil
}

// Remove deletes the quarantine and everything in it (the sandbox was deleted). It is
// idempotent.
func (q *Quarantine) Remove() error {
	if err := os.RemoveAll(q.dir); err != nil {
		return fmt.Errorf("removing quarantine %s: %w", q.dir, err)
	}
	return nil
}

// GitDir is the quarantine's bare repository.
func (q *Quarantine) GitDir() string { return q.gitDir }

func (q *Quarantine) run(ctx context.Context, inv invocation) ([]byte, error) {
	inv.gitDir = q.gitDir
	if inv.timeout == 0 {
		inv.timeout = q.opt.Timeout
	}
	if inv.maxOut == 0 {
		inv.maxOut = q.opt.MaxOutput
	}
	return q.r.run(ctx, inv)
}

// PackResult describes a pack ReceivePack indexed.
type PackResult struct {
	Objects uint32 // objects in the pack as sent (before thin bases were added)
	Bytes   int64  // bytes read
}

// ReceivePack reads one pack (as sent in a receive-pack request, after the commands) and
// indexes it into the quarantine with `git index-pack --stdin --strict --fix-thin`: every
// object is fsck'd and every link must resolve, in the pack or in the quarantine (a thin
// pack's bases must have been fetched first, see Fetcher). A pack over MaxPackBytes or
// MaxObjects is refused with errdefs.ErrResourceExhausted before or while git reads it; a
// malformed one with errdefs.ErrInvalidArgument. Nothing is indexed on error.
func (q *Quarantine) ReceivePack(ctx context.Context, pack io.Reader) (PackResult, error) {
	var hdr [packHeaderLen]byte
	if _, err := io.ReadFull(pack, hdr[:]); err != nil {
		return PackResult{}, fmt.Errorf("receiving pack: short header: %w", errdefs.ErrInvalidArgument)
	}
	n, err := ParsePackHeader(hdr[:])
	if err != nil {
		return PackResult{}, fmt.Errorf("receiving pack: %w", err)
	}
	if n > q.opt.MaxObjects {
		return PackResult{}, fmt.Errorf("receiving pack: %d objects, at most %d: %w", n, q.opt.MaxObjects, errdefs.ErrResourceExhausted)
	}
	body := &countingReader{r: pack, max: q.opt.MaxPackBytes - packHeaderLen}
	_, err = q.run(ctx, invocation{
		args:  []string{"index-pack", "--stdin", "--strict", "--fix-thin", fmt.Sprintf("--max-input-size=%d", q.opt.MaxPackBytes)},
		stdin: io.MultiReader(bytes.NewReader(hdr[:]), body),
	})
	res := PackResult{Objects: n, Bytes: packHeaderLen + body.n.Load()}
	if body.over.Load() {
		return res, fmt.Errorf("receiving pack: over %d bytes: %w", q.opt.MaxPackBytes, errdefs.ErrResourceExhausted)
	}
	if err != nil {
		return res, fmt.Errorf("receiving pack: %w", err)
	}
	q.log.Info("quarantine received pack", "dir", q.dir, "objects", n, "bytes", res.Bytes)
	return res, nil
}

const packHeaderLen = 12

// ParsePackHeader checks the 12-byte header of a git pack ("PACK", version 2 or 3, object
// count) and returns the object count. It is pure.
func ParsePackHeader(b []byte) (uint32, error) {
	if len(b) < packHeaderLen || string(b[:4]) != "PACK" {
		return 0, fmt.Errorf("not a pack: %w", errdefs.ErrInvalidArgument)
	}
	if v := binary.BigEndian.Uint32(b[4:8]); v != 2 && v != 3 {
		return 0, fmt.Errorf("pack version %d: %w", v, errdefs.ErrInvalidArgument)
	}
	return binary.BigEndian.Uint32(b[8:12]), nil
}

// countingReader reads at most max bytes; one more byte marks it over and fails the read.
// Its counters are atomic: the copy into git may still be blocked in Read after git ended.
type countingReader struct {
	r    io.Reader
	n    atomic.Int64
	max  int64
	over atomic.Bool
}

var errPackTooBig = errors.New("pack too big")

func (c *countingReader) Read(p []byte) (int, error) {
	if c.over.Load() {
		return 0, errPackTooBig
	}
	if room := c.max - c.n.Load() + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := c.r.Read(p)
	if c.n.Add(int64(n)) > c.max {
		c.over.Store(true)
		return 0, errPackTooBig
	}
	return n, err
}

// Fetcher makes objects of the real remote present in a quarantine: the bases of a thin
// pack, and the base commit of a report. The integration implements it with the brokered
// credential; PathFetcher fetches from a local repository.
type Fetcher interface {
	// Fetch fetches refs (full names, "refs/heads/main") of the remote into q, under
	// refs/moat/remote/. A ref the remote does not have is an error.
	Fetch(ctx context.Context, q *Quarantine, refs []string) error
}

// PathFetcher fetches from a repository on the host. The source repository's own config
// is read by the upload-pack git runs in it, so Path must be trusted (a mirror moat keeps,
// a test fixture) — never a sandbox's repository.
type PathFetcher struct{ Path string }

// Fetch implements Fetcher.
func (f PathFetcher) Fetch(ctx context.Context, q *Quarantine, refs []string) error {
	return q.FetchPath(ctx, f.Path, refs)
}

var _ Fetcher = PathFetcher{}

// FetchPath fetches refs from the trusted repository at path (absolute) into
// refs/moat/remote/<ref without refs/>, with the file protocol as the only one allowed
// and every object fsck'd.
func (q *Quarantine) FetchPath(ctx context.Context, path string, refs []string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("fetching from %q: not absolute: %w", path, errdefs.ErrInvalidArgument)
	}
	if len(refs) == 0 {
		return nil
	}
	args := []string{"fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-recurse-submodules", "--end-of-options", path}
	for _, ref := range refs {
		if err := CheckRefName(ref); err != nil {
			return fmt.Errorf("fetching from %s: %w", path, err)
		}
		args = append(args, "+"+ref+":refs/moat/remote/"+strings.TrimPrefix(ref, "refs/"))
	}
	if _, err := q.run(ctx, invocation{args: args, config: []string{"protocol.file.allow=always"}}); err != nil {
		return fmt.Errorf("fetching from %s: %w", path, err)
	}
	return nil
}

// HasCommit reports whether id names a commit present in the quarantine.
func (q *Quarantine) HasCommit(ctx context.Context, id string) (bool, error) {
	if err := CheckObjectID(id); err != nil {
		return false, err
	}
	out, err := q.run(ctx, invocation{args: []string{"cat-file", "-t", id}, okCodes: []int{1, 128}})
	var ec exitCode
	if errors.As(err, &ec) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(out)) == "commit", nil
}

// CheckObjectID accepts a full lower-case hex object id (SHA-1 or SHA-256). It is pure.
func CheckObjectID(id string) error {
	if len(id) != 40 && len(id) != 64 {
		return fmt.Errorf("object id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("object id %q: %w", id, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// CheckRefName accepts a full ref name under refs/ that git's check-ref-format would
// accept, and nothing that could read as an option, a refspec or a revision expression.
// It is pure.
func CheckRefName(ref string) error {
	bad := func() error { return fmt.Errorf("ref name %q: %w", ref, errdefs.ErrInvalidArgument) }
	if !strings.HasPrefix(ref, "refs/") || len(ref) > 1024 || strings.HasSuffix(ref, "/") ||
		strings.HasSuffix(ref, ".") || strings.Contains(ref, "..") || strings.Contains(ref, "@{") ||
		strings.Contains(ref, "//") {
		return bad()
	}
	for i := 0; i < len(ref); i++ {
		c := ref[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte(" ~^:?*[\\", c) >= 0 {
			return bad()
		}
	}
	for _, comp := range strings.Split(ref, "/") {
		if comp == "" || comp[0] == '.' || strings.HasSuffix(comp, ".lock") {
			return bad()
		}
	}
	return nil
}
