package changes

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/fsutil"
	"github.com/moatdev/moat/internal/safegit"
)

// Defaults of a Store.
const (
	DefaultMaxRecords = 500            // records kept per sandbox (up to a tenth more between prunings); the oldest decided go first
	DefaultMaxHeld    = 16             // held changes waiting per sandbox; more are refused
	DefaultHoldFor    = 24 * time.Hour // a held change nobody decided expires
	// DefaultMaxHeldBytes bounds the held push bodies a sandbox keeps waiting at once (one
	// push alone may be up to the gate's 512 MiB).
	DefaultMaxHeldBytes = 1 << 30
)

// Options configure a Store; zero values take the defaults.
type Options struct {
	MaxRecords   int
	MaxHeld      int
	MaxHeldBytes int64
	HoldFor      time.Duration
	Now          func() time.Time
	Log          *slog.Logger
}

// Store keeps change records and held push bodies as files: Root/<sandbox>/changes/
// <id>.json (0600, written atomically), and for a held push <id>.req (the request's
// method, path and headers) and <id>.body (its body, as the sandbox sent it), all in
// directories of mode 0700. Root is the git gate's directory, which the daemon removes
// with the sandbox. Safe for concurrent use.
type Store struct {
	root string
	opt  Options
	mu   sync.Mutex
}

// NewStore returns the store under root.
func NewStore(root string, opt Options) *Store {
	if opt.MaxRecords <= 0 {
		opt.MaxRecords = DefaultMaxRecords
	}
	if opt.MaxHeld <= 0 {
		opt.MaxHeld = DefaultMaxHeld
	}
	if opt.HoldFor <= 0 {
		opt.HoldFor = DefaultHoldFor
	}
	if opt.MaxHeldBytes <= 0 {
		opt.MaxHeldBytes = DefaultMaxHeldBytes
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	return &Store{root: root, opt: opt}
}

// HoldFor is how long a held change waits for a decision.
func (s *Store) HoldFor() time.Duration { return s.opt.HoldFor }

var idRE = regexp.MustCompile(`^ch-[0-9a-f]{8}$`)

// NewID returns a new random change id, "ch-" and 8 hex digits.
func NewID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "ch-" + hex.EncodeToString(b[:])
}

// CheckID says whether id is a change id.
func CheckID(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("change id %q: want ch- and 8 hex digits: %w", cut(id, 40), errdefs.ErrInvalidArgument)
	}
	return nil
}

func (s *Store) dir(sandbox string) (string, error) {
	if sandbox == "" || sandbox == "." || sandbox == ".." || filepath.Base(sandbox) != sandbox || strings.ContainsRune(sandbox, 0) {
		return "", fmt.Errorf("sandbox id %q: %w", cut(sandbox, 80), errdefs.ErrInvalidArgument)
	}
	return filepath.Join(s.root, sandbox, "changes"), nil
}

func (s *Store) path(sandbox, id, ext string) (string, error) {
	if err := CheckID(id); err != nil {
		return "", err
	}
	d, err := s.dir(sandbox)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, id+ext), nil
}

// Add stores a new record (bounded with Bound) and drops the oldest records of the
// sandbox beyond MaxRecords (never one still held or being applied).
func (s *Store) Add(r Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.add(r)
}

func (s *Store) add(r Record) error {
	Bound(&r)
	d, err := s.dir(r.Sandbox)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("change records: %w", err)
	}
	p, err := s.path(r.Sandbox, r.ID, ".json")
	if err != nil {
		return err
	}
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("change %s: %w", r.ID, errdefs.ErrAlreadyExists)
	}
	if err := s.write(p, r); err != nil {
		return err
	}
	s.prune(r.Sandbox)
	return nil
}

func (s *Store) write(p string, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(p, b, 0o600); err != nil {
		return fmt.Errorf("change record: %w", err)
	}
	return nil
}

// prune drops the oldest decided records down to MaxRecords once there are more than
// MaxRecords and a tenth: counting is a directory listing, and the records are read (to
// order them and keep the held ones) only once in that many pushes.
func (s *Store) prune(sandbox string) {
	d, err := s.dir(sandbox)
	if err != nil {
		return
	}
	ents, err := os.ReadDir(d)
	if err != nil {
		return
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			n++
		}
	}
	if n <= s.opt.MaxRecords+max(1, s.opt.MaxRecords/10) {
		return
	}
	list, err := s.list(sandbox)
	if err != nil {
		return
	}
	extra := len(list) - s.opt.MaxRecords
	for _, r := range list { // oldest first
		if extra <= 0 {
			break
		}
		if r.Decision == Held || r.Decision == Applying {
			continue
		}
		s.remove(sandbox, r.ID)
		extra--
	}
}

func (s *Store) remove(sandbox, id string) {
	for _, ext := range []string{".json", ".req", ".body"} {
		if p, err := s.path(sandbox, id, ext); err == nil {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.opt.Log.Warn("removing a change record", "sandbox", sandbox, "change", id, "err", err)
			}
		}
	}
}

// List returns the sandbox's records, oldest first; held ones past their expiry are
// expired first (their bodies dropped). A sandbox without records has none (no error).
func (s *Store) List(sandbox string) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list, err := s.list(sandbox)
	if err != nil {
		return nil, err
	}
	for i := range list {
		s.expire(&list[i])
	}
	return list, nil
}

func (s *Store) list(sandbox string) ([]Record, error) {
	d, err := s.dir(sandbox)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(d)
	if errors.Is(err, fs.ErrNotExist) {
		return []Record{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("change records: %w", err)
	}
	out := []Record{}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || CheckID(id) != nil {
			continue
		}
		r, err := s.read(sandbox, id)
		if err != nil {
			s.opt.Log.Warn("unreadable change record", "sandbox", sandbox, "change", id, "err", err)
			continue
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b Record) int { return a.Time.Compare(b.Time) })
	return out, nil
}

func (s *Store) read(sandbox, id string) (Record, error) {
	p, err := s.path(sandbox, id, ".json")
	if err != nil {
		return Record{}, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, fmt.Errorf("change %s of sandbox %s: %w", id, sandbox, errdefs.ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("change %s: %w", id, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("change %s: %w", id, err)
	}
	return r, nil
}

// expire moves a held record past its expiry to Expired (and drops its body). Called
// with mu held.
func (s *Store) expire(r *Record) {
	if r.Decision != Held || r.Expires == nil || s.opt.Now().Before(*r.Expires) {
		return
	}
	to, err := Transition(r.Decision, ActExpire)
	if err != nil {
		return
	}
	r.Decision = to
	r.Decided = &Decided{Action: ActExpire, By: "moat", Time: s.opt.Now(), Reason: "nobody decided within " + s.opt.HoldFor.String()}
	if p, err := s.path(r.Sandbox, r.ID, ".json"); err == nil {
		if err := s.write(p, *r); err != nil {
			s.opt.Log.Warn("expiring a held change", "sandbox", r.Sandbox, "change", r.ID, "err", err)
		}
	}
	s.dropHeld(r.Sandbox, r.ID)
}

// Get returns one record (errdefs.ErrNotFound if the sandbox has none with id).
func (s *Store) Get(sandbox, id string) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.read(sandbox, id)
	if err != nil {
		return Record{}, err
	}
	s.expire(&r)
	return r, nil
}

// Transition moves record id by action (see Transition; a change in the wrong state is
// errdefs.ErrConflict), lets update change the record (it may be nil), and stores it.
// Leaving Held or Applying for good drops the held body.
func (s *Store) Transition(sandbox, id, action string, update func(*Record)) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.read(sandbox, id)
	if err != nil {
		return Record{}, err
	}
	s.expire(&r)
	to, err := Transition(r.Decision, action)
	if err != nil {
		return Record{}, fmt.Errorf("change %s: %w", id, err)
	}
	r.Decision = to
	if update != nil {
		update(&r)
	}
	Bound(&r)
	p, err := s.path(sandbox, id, ".json")
	if err != nil {
		return Record{}, err
	}
	if err := s.write(p, r); err != nil {
		return Record{}, err
	}
	if to != Held && to != Applying {
		s.dropHeld(sandbox, id)
	}
	return r, nil
}

// SetReports sets the reports of push record id (by ref) and why one is missing, once
// they are computed (after an allowed push went on its way).
func (s *Store) SetReports(sandbox, id string, reports map[string]*safegit.ChangeReport, reportErr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.read(sandbox, id)
	if err != nil {
		return err
	}
	for i := range r.Refs {
		r.Refs[i].Report = reports[r.Refs[i].Ref]
	}
	r.ReportError = reportErr
	Bound(&r)
	p, err := s.path(sandbox, id, ".json")
	if err != nil {
		return err
	}
	return s.write(p, r)
}

// HeldRequest is what is kept of a held push's request, besides its body, to send it
// again as it was sent: the method, the path and query, and the headers that describe the
// body and the client (never Host: the session's authority is used).
type HeldRequest struct {
	Method   string      `json:"method"`
	Path     string      `json:"path"`
	RawQuery string      `json:"raw_query,omitempty"`
	Header   http.Header `json:"header"`
	Size     int64       `json:"size"`
}

// KeptHeaders returns the request headers a held push keeps: the body's type and encoding,
// git's protocol and agent, and Authorization (the placeholder of the sandbox's binding,
// which the interceptor swaps for the credential when the push is applied).
func KeptHeaders() []string {
	return []string{"Content-Type", "Content-Encoding", "Accept", "Accept-Encoding", "Git-Protocol", "User-Agent", "Authorization"}
}

// Hold stores a new record r (Decision Held) with its request and body (size bytes from
// body), and sets its expiry. When the sandbox already has MaxHeld changes waiting, or
// their bodies and this one would pass MaxHeldBytes, it is an errdefs.ErrResourceExhausted
// error and nothing is stored.
func (s *Store) Hold(r Record, req HeldRequest, body io.Reader, size int64) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list, err := s.list(r.Sandbox)
	if err != nil {
		return Record{}, err
	}
	waiting, bytes := 0, size
	for i := range list {
		s.expire(&list[i])
		if list[i].Decision == Held || list[i].Decision == Applying {
			waiting++
			if p, err := s.path(r.Sandbox, list[i].ID, ".body"); err == nil {
				if st, err := os.Lstat(p); err == nil {
					bytes += st.Size()
				}
			}
		}
	}
	if waiting >= s.opt.MaxHeld {
		return Record{}, fmt.Errorf("%d changes of this sandbox already wait for a decision: %w", waiting, errdefs.ErrResourceExhausted)
	}
	if bytes > s.opt.MaxHeldBytes {
		return Record{}, fmt.Errorf("the pushes waiting for a decision would keep more than %d bytes: %w", s.opt.MaxHeldBytes, errdefs.ErrResourceExhausted)
	}
	d, err := s.dir(r.Sandbox)
	if err != nil {
		return Record{}, err
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return Record{}, fmt.Errorf("held push: %w", err)
	}
	bodyPath, err := s.path(r.Sandbox, r.ID, ".body")
	if err != nil {
		return Record{}, err
	}
	reqPath, _ := s.path(r.Sandbox, r.ID, ".req")
	f, err := os.OpenFile(bodyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return Record{}, fmt.Errorf("held push: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(body, size))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	req.Size = n
	if err == nil {
		var b []byte
		if b, err = json.Marshal(req); err == nil {
			err = fsutil.WriteFileAtomic(reqPath, b, 0o600)
		}
	}
	if err == nil {
		r.Decision = Held
		exp := s.opt.Now().Add(s.opt.HoldFor)
		r.Expires = &exp
		err = s.add(r)
	}
	if err != nil {
		s.dropHeld(r.Sandbox, r.ID)
		return Record{}, fmt.Errorf("held push: %w", err)
	}
	return r, nil
}

// OpenHeld opens the request and body of held change id, for applying it. The caller
// closes the file.
func (s *Store) OpenHeld(sandbox, id string) (HeldRequest, *os.File, error) {
	reqPath, err := s.path(sandbox, id, ".req")
	if err != nil {
		return HeldRequest{}, nil, err
	}
	bodyPath, _ := s.path(sandbox, id, ".body")
	b, err := os.ReadFile(reqPath)
	if err != nil {
		return HeldRequest{}, nil, fmt.Errorf("held push %s: %w", id, notFound(err))
	}
	var req HeldRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return HeldRequest{}, nil, fmt.Errorf("held push %s: %w", id, err)
	}
	f, err := os.OpenFile(bodyPath, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return HeldRequest{}, nil, fmt.Errorf("held push %s: %w", id, notFound(err))
	}
	return req, f, nil
}

// HasHeld says whether held change id still has its body (for tests and checks).
func (s *Store) HasHeld(sandbox, id string) bool {
	p, err := s.path(sandbox, id, ".body")
	if err != nil {
		return false
	}
	_, err = os.Lstat(p)
	return err == nil
}

func (s *Store) dropHeld(sandbox, id string) {
	for _, ext := range []string{".req", ".body"} {
		if p, err := s.path(sandbox, id, ext); err == nil {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.opt.Log.Warn("removing a held push", "sandbox", sandbox, "change", id, "err", err)
			}
		}
	}
}

// Recover marks records left Applying by a daemon that stopped mid-apply as
// apply-failed (whether the remote took the push is unknown; the report says so). Called
// once at start.
func (s *Store) Recover() {
	s.mu.Lock()
	defer s.mu.Unlock()
	ents, err := os.ReadDir(s.root)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		list, err := s.list(e.Name())
		if err != nil {
			continue
		}
		for _, r := range list {
			if r.Decision != Applying {
				continue
			}
			r.Decision = ApplyFailed
			if r.Decided == nil {
				r.Decided = &Decided{Action: ActApprove, Time: s.opt.Now()}
			}
			r.Decided.Result = "the daemon stopped while applying the change; whether the remote took it is unknown (compare the remote's branch)"
			if p, err := s.path(r.Sandbox, r.ID, ".json"); err == nil {
				_ = s.write(p, r)
			}
			s.dropHeld(r.Sandbox, r.ID)
		}
	}
}

func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return errdefs.ErrNotFound
	}
	return err
}
