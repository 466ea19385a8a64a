package clusterfront

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Caller is who a front API key belongs to.
type Caller struct {
	// Owner names the person or agent; keys with the same owner share their sandboxes.
	Owner string
	// Admin may see and use every sandbox of the front, and bind any moat secret.
	Admin bool
	// Secrets are the moat secrets the key's sandboxes may bind (moat.dev/credentials).
	Secrets []string
}

type callerKey struct {
	hash [sha256.Size]byte
	who  Caller
}

// ParseCallerKeys parses a --cluster-keys file: one key per line, "OWNER SHA256-HEX
// [admin] [secrets=NAME,...]", where SHA256-HEX is the SHA-256 of the key as clients send
// it; blank lines and lines starting with # are skipped. The file holds no key, only
// hashes. It is pure.
func ParseCallerKeys(b []byte) ([]callerKey, error) {
	var out []callerKey
	seen := map[[sha256.Size]byte]bool{}
	err := eachLine(b, func(n int, f []string) error {
		if len(f) < 2 || len(f) > 4 {
			return fmt.Errorf("line %d: want OWNER SHA256-HEX [admin] [secrets=NAME[,NAME]]", n)
		}
		if !validOwner(f[0]) {
			return fmt.Errorf("line %d: owner %q: want 1-64 bytes of letters, digits and . _ @ -", n, f[0])
		}
		h, err := hex.DecodeString(f[1])
		if err != nil || len(h) != sha256.Size {
			return fmt.Errorf("line %d: the key's SHA-256 must be 64 hex digits (printf %%s \"$KEY\" | sha256sum)", n)
		}
		k := callerKey{who: Caller{Owner: f[0]}}
		for i, opt := range f[2:] {
			list, isSecrets := strings.CutPrefix(opt, "secrets=")
			switch {
			case opt == "admin" && !k.who.Admin && i == 0:
				k.who.Admin = true
			case isSecrets && k.who.Secrets == nil:
				for _, name := range strings.Split(list, ",") {
					if !validOwner(name) {
						return fmt.Errorf("line %d: secret name %q", n, name)
					}
					k.who.Secrets = append(k.who.Secrets, name)
				}
			default:
				return fmt.Errorf("line %d: %q: want admin, then secrets=NAME[,NAME]", n, opt)
			}
		}
		copy(k.hash[:], h)
		if seen[k.hash] {
			return fmt.Errorf("line %d: the same key twice", n)
		}
		seen[k.hash] = true
		out = append(out, k)
		return nil
	})
	return out, err
}

// ParseNodeKeys parses a --cluster-node-keys file: "NODE API-KEY" per line, NODE being a
// Kubernetes node name or * for every node without a line of its own; the key is an
// admin API key of that node's daemon. It is pure.
func ParseNodeKeys(b []byte) (map[string]string, error) {
	out := map[string]string{}
	err := eachLine(b, func(n int, f []string) error {
		if len(f) != 2 {
			return fmt.Errorf("line %d: want NODE API-KEY", n)
		}
		if f[0] != "*" && !validOwner(f[0]) {
			return fmt.Errorf("line %d: node name %q", n, f[0])
		}
		if _, dup := out[f[0]]; dup {
			return fmt.Errorf("line %d: node %s twice", n, f[0])
		}
		out[f[0]] = f[1]
		return nil
	})
	return out, err
}

func eachLine(b []byte, fn func(n int, fields []string) error) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 4096), 4096)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(n, strings.Fields(line)); err != nil {
			return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// validOwner: what an owner or node name may be (it is written into Pod annotations and
// logs).
func validOwner(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._@-", c) >= 0) {
			return false
		}
	}
	return true
}

// lookupKey returns the caller whose key hashes to the hash of key, comparing every
// entry in constant time.
func lookupKey(keys []callerKey, key string) (Caller, bool) {
	h := sha256.Sum256([]byte(key))
	var who Caller
	found := 0
	for _, k := range keys {
		if subtle.ConstantTimeCompare(h[:], k.hash[:]) == 1 {
			who, found = k.who, 1
		}
	}
	return who, found == 1
}

// keyFile is a file re-read when it changes (a Secret mounted as a volume is replaced
// under the front when the Secret is updated). A file that turns bad keeps the last good
// contents, and the error is logged by the caller.
type keyFile[T any] struct {
	path  string
	parse func([]byte) (T, error)

	mu      sync.Mutex
	checked time.Time
	stamp   string
	val     T
}

func newKeyFile[T any](path string, parse func([]byte) (T, error)) (*keyFile[T], error) {
	f := &keyFile[T]{path: path, parse: parse}
	if _, err := f.get(time.Now()); err != nil {
		return nil, err
	}
	return f, nil
}

// get returns the contents, re-reading the file at most once a second when its size or
// modification time changed.
func (f *keyFile[T]) get(now time.Time) (T, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.checked.IsZero() && now.Sub(f.checked) < time.Second {
		return f.val, nil
	}
	f.checked = now
	fi, err := os.Stat(f.path)
	if err != nil {
		return f.val, err
	}
	stamp := fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
	if stamp == f.stamp {
		return f.val, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return f.val, err
	}
	v, err := f.parse(b)
	if err != nil {
		return f.val, fmt.Errorf("%s: %w", f.path, err)
	}
	f.val, f.stamp = v, stamp
	return v, nil
}
