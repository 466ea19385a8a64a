package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/fsutil"
)

const (
	// KeyFile is the name of the store's key in the data directory: 32 random bytes, a
	// regular file owned by root, mode 0400.
	KeyFile = "secrets.key"
	// DataFile is the name of the encrypted values in the data directory (mode 0600).
	DataFile = "secrets.json"
	// MaxValueBytes bounds one secret's value.
	MaxValueBytes = 64 << 10
	// NameRule is the rule every secret name follows; names become environment variable
	// names inside sandboxes.
	NameRule = "^[A-Z_][A-Z0-9_]{0,63}$"

	keyBytes     = 32
	maxDataBytes = 64 << 20
	fileVersion  = 1
)

// Info describes a stored secret without its value.
type Info struct {
	Name             string
	Created, Updated time.Time
	// GitHubApp is set when the secret is a GitHub App's private key, from which moat
	// mints short-lived installation tokens; the value itself is then never injected.
	GitHubApp *GitHubApp
	// Scope is where the secret may be sent; nil: nowhere (it cannot be bound). From
	// Lookup and Stat it is authenticated; from List it is as the file says.
	Scope *Scope
}

// GitHubApp identifies a GitHub App installation. It is not secret: it is stored in clear
// beside the sealed private key.
type GitHubApp struct {
	AppID          string `json:"app_id"`
	InstallationID int64  `json:"installation_id"`
	// APIURL is the REST API base; empty means https://api.github.com.
	APIURL string `json:"api_url,omitempty"`
}

// Store keeps named secrets in a data directory, each value encrypted with AES-256-GCM
// under the directory's key, with the secret's name, its GitHub App and its scope as
// additional authenticated data (a value moved to another name, or given another App or a
// wider scope in the file, does not decrypt). Safe for concurrent use, also by several
// processes sharing the directory: every call reads the file afresh, and writes hold an
// exclusive lock (flock on the key file) and replace the file atomically.
type Store struct {
	dir   string
	aead  cipher.AEAD
	keyID string // identifies the key in the data file, to tell "wrong key" from tampering
	mu    sync.Mutex
}

// file is the JSON form of DataFile. Names and dates are in clear; values are sealed.
type file struct {
	Version int              `json:"version"`
	KeyID   string           `json:"key_id"`
	Secrets map[string]entry `json:"secrets"`
}

type entry struct {
	// Sealed is the 12-byte nonce followed by the AES-256-GCM ciphertext and tag.
	Sealed  []byte    `json:"sealed"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// GitHubApp marks an App private key (see Info).
	GitHubApp *GitHubApp `json:"github_app,omitempty"`
	// Scope is where the value may be sent (see Info).
	Scope *Scope `json:"scope,omitempty"`
}

// Open opens the store in dir, the daemon's data directory, which must exist, belong to
// root and not be writable by group or others. On first use it generates the key file;
// an existing key file must be a regular file (not a symbolic link) owned by root with no
// group or other permission bits. An existing data file must parse. Open fails, with an
// error naming the file and the fix, on any of these.
func Open(dir string) (*Store, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("secret store: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("secret store: %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("secret store: %s must be owned by root and not writable by group or others (mode %v): chown root %s && chmod 700 %s", dir, fi.Mode().Perm(), dir, dir)
	}
	key, err := loadKey(dir)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("moat secrets key id"))
	s := &Store{dir: dir, aead: aead, keyID: hex.EncodeToString(mac.Sum(nil)[:8])}
	if _, err := s.read(); err != nil {
		return nil, err
	}
	return s, nil
}

// loadKey reads the key file, generating it first if neither it nor a data file exists.
func loadKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, KeyFile)
	key, err := readKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if _, err := os.Lstat(filepath.Join(dir, DataFile)); err == nil {
		return nil, fmt.Errorf("secret store: %s is missing but %s exists: its values cannot be decrypted without the key it was written with; restore the key, or move %s aside to start an empty store",
			path, filepath.Join(dir, DataFile), DataFile)
	}
	if err := createKey(dir, path); err != nil {
		return nil, err
	}
	return readKey(path)
}

// readKey reads and checks the key file; a missing file is reported as fs.ErrNotExist.
func readKey(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("secret store: %s is a symbolic link; it must be a regular file", path)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("secret store: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secret store: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("secret store: %s is not a regular file", path)
	case !ok || st.Uid != 0:
		return nil, fmt.Errorf("secret store: %s must be owned by root: chown root %s", path, path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("secret store: %s has mode %v; it must have no group or other permissions: chmod 400 %s", path, fi.Mode().Perm(), path)
	case fi.Size() != keyBytes:
		return nil, fmt.Errorf("secret store: %s holds %d bytes, not a %d-byte key", path, fi.Size(), keyBytes)
	}
	key := make([]byte, keyBytes)
	if _, err := io.ReadFull(f, key); err != nil {
		return nil, fmt.Errorf("secret store: reading %s: %w", path, err)
	}
	return key, nil
}

// createKey writes a new key to a temporary file and links it into place, so the key file
// never exists half written and, when two processes race, the first link wins.
func createKey(dir, path string) error {
	key := make([]byte, keyBytes)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".secrets.key-*")
	if err != nil {
		return fmt.Errorf("secret store: creating key: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(0o400)
	if err == nil {
		_, err = tmp.Write(key)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
		if errors.Is(err, fs.ErrExist) {
			return nil // another process made the key first; use theirs
		}
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("secret store: creating %s: %w", path, err)
	}
	return nil
}

// CheckName returns an error of class errdefs.ErrInvalidArgument unless name follows
// NameRule. The error does not repeat the name (it might be a value typed in the wrong
// place).
func CheckName(name string) error {
	if !validName(name) {
		return fmt.Errorf("invalid secret name: a name must match %s (upper-case letters, digits and underscores, not starting with a digit, at most 64 characters): %w", NameRule, errdefs.ErrInvalidArgument)
	}
	return nil
}

func validName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '_' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// Set stores v under name, replacing any value (and kind) the name had; its creation time
// and scope stay (a new name has no scope, so cannot be bound until SetScope gives it one).
// Invalid names, empty values and values over MaxValueBytes are
// errdefs.ErrInvalidArgument.
func (s *Store) Set(name string, v Value) error { return s.Put(name, v, nil, nil) }

// SetGitHubApp stores the private key of the GitHub App installation app under name, as
// Set does. The caller checks app and the key (tokens.NewGitHubApp).
func (s *Store) SetGitHubApp(name string, key Value, app GitHubApp) error {
	return s.Put(name, key, &app, nil)
}

// Put stores v under name, as the key of the GitHub App app when app is set, with scope sc
// (Normalize'd here); with sc nil the name keeps the scope it has. Errors as Set's, and
// errdefs.ErrInvalidArgument for a scope that does not normalize or that names
// repositories for a secret that is not an App key.
func (s *Store) Put(name string, v Value, app *GitHubApp, sc *Scope) error {
	if err := CheckName(name); err != nil {
		return err
	}
	plain := []byte(v.str())
	if len(plain) == 0 {
		return fmt.Errorf("secret %s: the value is empty: %w", name, errdefs.ErrInvalidArgument)
	}
	if len(plain) > MaxValueBytes {
		return fmt.Errorf("secret %s: the value is larger than %d bytes: %w", name, MaxValueBytes, errdefs.ErrInvalidArgument)
	}
	if sc != nil {
		n, err := sc.Normalize()
		if err != nil {
			return fmt.Errorf("secret %s: %w", name, err)
		}
		sc = &n
	}
	return s.update(func(f *file) error {
		if err := s.checkKey(f); err != nil {
			return err
		}
		now := time.Now().UTC()
		e := entry{Created: now, GitHubApp: app, Scope: sc}
		if old, ok := f.Secrets[name]; ok {
			e.Created = old.Created
			if sc == nil {
				// The old scope is taken over only if it is the one sealed with the old
				// value: an edit of the file must not become authentic here. An entry that
				// does not decrypt leaves the name without a scope.
				if p, err := s.open(name, old); err == nil {
					clear(p)
					e.Scope = old.Scope
				}
			}
		}
		return s.seal(f, name, e, plain, now)
	})
}

// SetScope replaces the scope of the secret name (errdefs.ErrNotFound if there is none),
// keeping its value and kind: the value is decrypted and sealed again with sc. Errors for
// sc as Put's.
func (s *Store) SetScope(name string, sc Scope) error {
	if err := CheckName(name); err != nil {
		return err
	}
	n, err := sc.Normalize()
	if err != nil {
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return s.update(func(f *file) error {
		old, ok := f.Secrets[name]
		if !ok {
			return fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
		}
		if err := s.checkKey(f); err != nil {
			return err
		}
		plain, err := s.open(name, old)
		if err != nil {
			return err
		}
		defer clear(plain)
		e := entry{Created: old.Created, GitHubApp: old.GitHubApp, Scope: &n}
		return s.seal(f, name, e, plain, time.Now().UTC())
	})
}

// seal encrypts plain into e, checks that e's scope fits its kind, and stores e as name
// in f.
func (s *Store) seal(f *file, name string, e entry, plain []byte, now time.Time) error {
	if e.Scope != nil && len(e.Scope.Repositories) > 0 && e.GitHubApp == nil {
		return fmt.Errorf("secret %s: repositories scope a GitHub App key, and this secret is not one: give it a scope without them (--hosts without --github-repo): %w", name, errdefs.ErrInvalidArgument)
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	e.Sealed = s.aead.Seal(nonce, nonce, plain, aad(name, e.GitHubApp, e.Scope))
	e.Updated = now
	f.Secrets[name] = e
	return nil
}

// aad is what a value is sealed with besides itself: its name, for an App key the App it
// belongs to, and its scope, so that none of them can be changed in the clear part of the
// file without the value failing to decrypt. A secret without App or scope has the AAD it
// had before moat kept either.
func aad(name string, app *GitHubApp, sc *Scope) []byte {
	b := []byte(name)
	if app != nil {
		j, _ := json.Marshal(app)
		b = append(append(b, "\x00github-app\x00"...), j...)
	}
	if sc != nil {
		j, _ := json.Marshal(sc)
		b = append(append(b, "\x00scope\x00"...), j...)
	}
	return b
}

func (e entry) info(name string) Info {
	return Info{Name: name, Created: e.Created, Updated: e.Updated, GitHubApp: e.GitHubApp, Scope: e.Scope}
}

// open decrypts e, the entry of name, checking its name, App and scope with it.
func (s *Store) open(name string, e entry) ([]byte, error) {
	ns := s.aead.NonceSize()
	if len(e.Sealed) < ns+s.aead.Overhead() {
		return nil, fmt.Errorf("secret %s: the stored value in %s is truncated", name, s.path())
	}
	plain, err := s.aead.Open(nil, e.Sealed[:ns], e.Sealed[ns:], aad(name, e.GitHubApp, e.Scope))
	if err != nil {
		return nil, fmt.Errorf("secret %s: the stored value does not decrypt: %s was altered, or the value was written with another key than %s",
			name, s.path(), filepath.Join(s.dir, KeyFile))
	}
	return plain, nil
}

// Get returns the value stored under name: errdefs.ErrNotFound when there is none, and an
// error (of no class) when it does not decrypt, which means the data file was altered or
// the key file is not the one the value was written with.
func (s *Store) Get(name string) (Value, error) {
	v, _, err := s.Lookup(name)
	return v, err
}

// Lookup returns the value stored under name and what kind of secret it is, from one read
// of the store (so the two agree), with Get's errors.
func (s *Store) Lookup(name string) (Value, Info, error) {
	if err := CheckName(name); err != nil {
		return Value{}, Info{}, err
	}
	f, err := s.read()
	if err != nil {
		return Value{}, Info{}, err
	}
	e, ok := f.Secrets[name]
	if !ok {
		return Value{}, Info{}, fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	if err := s.checkKey(f); err != nil {
		return Value{}, Info{}, err
	}
	plain, err := s.open(name, e)
	if err != nil {
		return Value{}, Info{}, err
	}
	defer clear(plain)
	return NewValue(string(plain)), e.info(name), nil
}

// Stat returns what kind of secret name is and its scope, authenticated like Lookup's
// (the value is decrypted and dropped), with Get's errors.
func (s *Store) Stat(name string) (Info, error) {
	_, info, err := s.Lookup(name)
	return info, err
}

// List returns every secret's name, dates, kind and scope, sorted by name, as the data file
// has them (not authenticated: Stat is).
func (s *Store) List() ([]Info, error) {
	f, err := s.read()
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(f.Secrets))
	for name, e := range f.Secrets {
		out = append(out, e.info(name))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Delete removes the secret name: errdefs.ErrNotFound when there is none.
func (s *Store) Delete(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return s.update(func(f *file) error {
		if _, ok := f.Secrets[name]; !ok {
			return fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
		}
		delete(f.Secrets, name)
		return nil
	})
}

// checkKey refuses a data file written with another key, so values under two keys never
// mix in one file.
func (s *Store) checkKey(f *file) error {
	if f.KeyID != s.keyID && len(f.Secrets) > 0 {
		return fmt.Errorf("secret store: %s was written with another key than %s (key id %s, this key %s): restore that key, or move %s aside to start an empty store",
			s.path(), filepath.Join(s.dir, KeyFile), f.KeyID, s.keyID, DataFile)
	}
	return nil
}

func (s *Store) path() string { return filepath.Join(s.dir, DataFile) }

// read loads the data file; a missing file is an empty store.
func (s *Store) read() (*file, error) {
	empty := &file{Version: fileVersion, KeyID: s.keyID, Secrets: map[string]entry{}}
	fh, err := os.OpenFile(s.path(), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return empty, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("secret store: %s is a symbolic link; it must be a regular file", s.path())
	}
	if err != nil {
		return nil, fmt.Errorf("secret store: %w", err)
	}
	defer fh.Close()
	if fi, err := fh.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secret store: %s is not a regular file", s.path())
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxDataBytes+1))
	if err != nil {
		return nil, fmt.Errorf("secret store: reading %s: %w", s.path(), err)
	}
	if len(data) > maxDataBytes {
		return nil, fmt.Errorf("secret store: %s is larger than %d bytes", s.path(), maxDataBytes)
	}
	f := &file{}
	if err := json.Unmarshal(data, f); err != nil {
		return nil, fmt.Errorf("secret store: %s does not parse: %v", s.path(), err)
	}
	if f.Version != fileVersion {
		return nil, fmt.Errorf("secret store: %s has version %d; this moat reads version %d", s.path(), f.Version, fileVersion)
	}
	if f.Secrets == nil {
		f.Secrets = map[string]entry{}
	}
	return f, nil
}

// update runs change on the data file under the process mutex and an exclusive flock on
// the key file (shared with other processes using the directory), then replaces the file
// atomically: temporary file, fsync, rename, fsync of the directory.
func (s *Store) update(change func(*file) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	lock, err := os.OpenFile(filepath.Join(s.dir, KeyFile), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("secret store: locking: %w", err)
	}
	defer lock.Close() // releases the flock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("secret store: locking %s: %w", lock.Name(), err)
	}
	f, err := s.read()
	if err != nil {
		return err
	}
	if err := change(f); err != nil {
		return err
	}
	if len(f.Secrets) == 0 {
		f.KeyID = s.keyID // an empty store belongs to whatever key it is opened with
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	err = fsutil.WriteFileAtomic(s.path(), append(data, '\n'), 0o600)
	if err != nil {
		return fmt.Errorf("secret store: writing %s: %w", s.path(), err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
