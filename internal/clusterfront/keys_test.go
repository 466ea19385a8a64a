package clusterfront

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

func hashOf(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

func TestParseCallerKeys(t *testing.T) {
	ka, kb, kc := hashOf("key-a"), hashOf("key-b"), hashOf("key-c")
	keys, err := ParseCallerKeys([]byte("# the front's keys\n\nalice " + ka + "\n  ops@example " + kb + " admin\nci-bot " + kc + " secrets=GH_TOKEN,NPM\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		want Caller
		ok   bool
	}{
		{"key-a", Caller{Owner: "alice"}, true},
		{"key-b", Caller{Owner: "ops@example", Admin: true}, true},
		{"key-c", Caller{Owner: "ci-bot", Secrets: []string{"GH_TOKEN", "NPM"}}, true},
		{"key-d", Caller{}, false},
		{"", Caller{}, false},
		{ka, Caller{}, false}, // the hash itself is not a key
	} {
		got, ok := lookupKey(keys, c.key)
		if ok != c.ok || got.Owner != c.want.Owner || got.Admin != c.want.Admin || !slices.Equal(got.Secrets, c.want.Secrets) {
			t.Errorf("lookupKey(%q) = %+v %v, want %+v %v", c.key, got, ok, c.want, c.ok)
		}
	}
	for _, bad := range []string{
		"alice",             // no hash
		"alice " + ka[:63],  // short hash
		"alice " + ka + "0", // long hash
		"alice " + strings.ToUpper(ka)[:62] + "zz", // not hex
		"al ice " + ka,                         // three words, the last not an option
		"alice " + ka + " root",                // unknown option
		"alice " + ka + " admin admin",         // twice
		"alice " + ka + " secrets=a secrets=b", // twice
		"alice " + ka + " secrets=a,,b",        // empty name
		"alice " + ka + " secrets=a admin",     // admin after secrets
		"al/ice " + ka,                         // bad owner
		strings.Repeat("a", 65) + " " + ka,     // long owner
		"alice " + ka + "\nbob " + ka,          // the same key twice
		"alice " + ka + " admin secrets=x extra",
	} {
		if _, err := ParseCallerKeys([]byte(bad)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseCallerKeys(%q) = %v, want invalid argument", bad, err)
		}
	}
}

func TestParseNodeKeys(t *testing.T) {
	m, err := ParseNodeKeys([]byte("# node keys\nmoat-a k1\n* k2\n"))
	if err != nil || len(m) != 2 || m["moat-a"] != "k1" || m["*"] != "k2" {
		t.Fatalf("ParseNodeKeys = %v %v", m, err)
	}
	for _, bad := range []string{"moat-a", "moat-a k1 extra", "moat-a k1\nmoat-a k2", "moat/a k1", "** k"} {
		if _, err := ParseNodeKeys([]byte(bad)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseNodeKeys(%q) = %v, want invalid argument", bad, err)
		}
	}
}

// A key file is re-read when it changes; a file that turns bad keeps the last good keys.
func TestKeyFileReload(t *testing.T) {
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte("alice "+hashOf("a")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := newKeyFile(p, ParseCallerKeys)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if keys, _ := f.get(now); len(keys) != 1 {
		t.Fatalf("keys %v", keys)
	}
	if err := os.WriteFile(p, []byte("alice "+hashOf("a")+"\nbob "+hashOf("b")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if keys, _ := f.get(now.Add(100 * time.Millisecond)); len(keys) != 1 {
		t.Fatalf("re-read within a second: %v", keys)
	}
	now = now.Add(2 * time.Second)
	if keys, _ := f.get(now); len(keys) != 2 {
		t.Fatalf("not re-read: %v", keys)
	}
	if err := os.WriteFile(p, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if keys, err := f.get(now); len(keys) != 2 || err == nil {
		t.Fatalf("a bad file: %v %v", keys, err)
	}
	if _, err := newKeyFile(filepath.Join(t.TempDir(), "none"), ParseCallerKeys); err == nil {
		t.Fatal("a missing file accepted")
	}
}

func FuzzParseCallerKeys(f *testing.F) {
	f.Add([]byte("alice " + hashOf("a") + " admin secrets=X,Y\n# c\n"))
	f.Add([]byte("bob " + hashOf("b") + "\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := ParseCallerKeys(b)
		if err != nil {
			return
		}
		for _, k := range keys {
			if !validOwner(k.who.Owner) {
				t.Fatalf("owner %q accepted", k.who.Owner)
			}
			for _, s := range k.who.Secrets {
				if !validOwner(s) {
					t.Fatalf("secret %q accepted", s)
				}
			}
		}
	})
}

func FuzzParseNodeKeys(f *testing.F) {
	f.Add([]byte("moat-a k1\n* k2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseNodeKeys(b)
		if err != nil {
			return
		}
		for n, k := range m {
			if n != "*" && !validOwner(n) || k == "" || strings.ContainsAny(k, " \t\n") {
				t.Fatalf("node %q key %q accepted", n, k)
			}
		}
	})
}
