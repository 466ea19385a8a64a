package secrets

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/testutil"
)

// newStore opens a store in a fresh directory. The store insists on root ownership.
func newStore(t *testing.T) (*Store, string) {
	t.Helper()
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func mustGet(t *testing.T, s *Store, name string) string {
	t.Helper()
	v, err := s.Get(name)
	if err != nil {
		t.Fatalf("Get %s: %v", name, err)
	}
	return v.Reveal()
}

func TestRoundTripAcrossReopen(t *testing.T) {
	s, dir := newStore(t)
	if list, err := s.List(); err != nil || len(list) != 0 {
		t.Fatalf("new store lists %v, %v", list, err)
	}
	for name, val := range map[string]string{"GITHUB_TOKEN": "ghp_abc", "_X": "line1\nline2\x00\xff", "Z9": strings.Repeat("v", MaxValueBytes)} {
		if err := s.Set(name, NewValue(val)); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := s.List()

	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s2, "GITHUB_TOKEN"); got != "ghp_abc" {
		t.Fatalf("after reopen: %q", got)
	}
	if got := mustGet(t, s2, "_X"); got != "line1\nline2\x00\xff" {
		t.Fatalf("binary value: %q", got)
	}
	if got := mustGet(t, s2, "Z9"); len(got) != MaxValueBytes {
		t.Fatalf("large value: %d bytes", len(got))
	}
	list, err := s2.List()
	if err != nil || len(list) != 3 || list[0].Name != "GITHUB_TOKEN" || list[1].Name != "Z9" || list[2].Name != "_X" {
		t.Fatalf("List: %+v, %v", list, err)
	}
	for i, in := range list {
		if in.Created.IsZero() || !in.Created.Equal(in.Updated) || !in.Created.Equal(before[i].Created) {
			t.Fatalf("dates of %s: %+v (before reopen %+v)", in.Name, in, before[i])
		}
	}

	// Replace keeps the creation date and moves the update date.
	if err := s2.Set("GITHUB_TOKEN", NewValue("ghp_new")); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "GITHUB_TOKEN"); got != "ghp_new" {
		t.Fatalf("after replace (seen by the first store): %q", got)
	}
	list, _ = s.List()
	if !list[0].Created.Equal(before[0].Created) || !list[0].Updated.After(before[0].Updated) {
		t.Fatalf("dates after replace: %+v, before %+v", list[0], before[0])
	}

	if err := s.Delete("GITHUB_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("GITHUB_TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
	if _, err := s2.Get("GITHUB_TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if _, err := s2.Get("NEVER"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get of a missing name: %v", err)
	}
}

func TestFiles(t *testing.T) {
	s, dir := newStore(t)
	if err := s.Set("A", NewValue("x")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{KeyFile: 0o400, DataFile: 0o600} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, KeyFile)); fi.Size() != keyBytes {
		t.Errorf("key file: %d bytes", fi.Size())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("data dir holds %v, want only the key and the data file", entries)
	}
}

// TestNoCleartextOnDisk: no file in the data directory holds a value in clear.
func TestNoCleartextOnDisk(t *testing.T) {
	s, dir := newStore(t)
	vals := map[string]string{"A": "correct-horse-battery-staple", "B": "ghp_0123456789abcdefABCDEF", "C": "\x00\x01binary\xfe"}
	for name, v := range vals {
		if err := s.Set(name, NewValue(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Set("A", NewValue(vals["A"])); err != nil { // a replace writes the file again
		t.Fatal(err)
	}
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		for name, v := range vals {
			if bytes.Contains(data, []byte(v)) {
				t.Errorf("%s holds the value of %s in clear", path, name)
			}
		}
		return nil
	})
	if err != nil || n != 2 {
		t.Fatalf("walked %d files: %v", n, err)
	}
}

func editData(t *testing.T, dir string, edit func(f *file)) {
	t.Helper()
	path := filepath.Join(dir, DataFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	edit(&f)
	if data, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSwappedValuesDoNotDecrypt: the name is authenticated with the value, so a value moved
// to another name (by someone who can write the data file) does not decrypt.
func TestSwappedValuesDoNotDecrypt(t *testing.T) {
	s, dir := newStore(t)
	_ = s.Set("FIRST", NewValue("value-one"))
	_ = s.Set("SECOND", NewValue("value-two"))
	editData(t, dir, func(f *file) {
		a, b := f.Secrets["FIRST"], f.Secrets["SECOND"]
		a.Sealed, b.Sealed = b.Sealed, a.Sealed
		f.Secrets["FIRST"], f.Secrets["SECOND"] = a, b
	})
	for _, name := range []string{"FIRST", "SECOND"} {
		v, err := s.Get(name)
		if err == nil {
			t.Fatalf("Get %s after the swap: %q", name, v.Reveal())
		}
		if !strings.Contains(err.Error(), "does not decrypt") || strings.Contains(err.Error(), "value-") {
			t.Fatalf("Get %s: %v", name, err)
		}
	}
}

func TestTamperedValue(t *testing.T) {
	s, dir := newStore(t)
	_ = s.Set("A", NewValue("value"))
	editData(t, dir, func(f *file) {
		e := f.Secrets["A"]
		e.Sealed[len(e.Sealed)-1] ^= 1
		f.Secrets["A"] = e
	})
	if _, err := s.Get("A"); err == nil || !strings.Contains(err.Error(), "does not decrypt") {
		t.Fatalf("Get of a tampered value: %v", err)
	}
	editData(t, dir, func(f *file) {
		e := f.Secrets["A"]
		e.Sealed = e.Sealed[:10]
		f.Secrets["A"] = e
	})
	if _, err := s.Get("A"); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("Get of a truncated value: %v", err)
	}
}

func writeKey(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, KeyFile)
	_ = os.Remove(path)
	key := make([]byte, keyBytes)
	rand.Read(key)
	if err := os.WriteFile(path, key, 0o400); err != nil {
		t.Fatal(err)
	}
}

func TestWrongKey(t *testing.T) {
	s, dir := newStore(t)
	_ = s.Set("A", NewValue("value"))
	writeKey(t, dir)
	s2, err := Open(dir) // names and dates stay readable
	if err != nil {
		t.Fatal(err)
	}
	if list, err := s2.List(); err != nil || len(list) != 1 {
		t.Fatalf("List with another key: %v, %v", list, err)
	}
	_, err = s2.Get("A")
	if err == nil || !strings.Contains(err.Error(), "written with another key") {
		t.Fatalf("Get with another key: %v", err)
	}
	t.Log(err)
	// Writing under a second key into the same file is refused too.
	if err := s2.Set("B", NewValue("v")); err == nil || !strings.Contains(err.Error(), "another key") {
		t.Fatalf("Set with another key: %v", err)
	}
	// Once the old values are gone, the file belongs to the new key.
	if err := s2.Delete("A"); err != nil {
		t.Fatal(err)
	}
	if err := s2.Set("B", NewValue("v")); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s2, "B"); got != "v" {
		t.Fatal(got)
	}

	// The key id altered to match: the cipher itself refuses.
	writeKey(t, dir)
	s3, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	editData(t, dir, func(f *file) { f.KeyID = s3.keyID })
	if _, err := s3.Get("B"); err == nil || !strings.Contains(err.Error(), "does not decrypt") {
		t.Fatalf("Get with another key and a matching key id: %v", err)
	}
}

func TestKeyFileChecks(t *testing.T) {
	testutil.RequiresRoot(t)
	setup := func(t *testing.T) (string, string) {
		dir := t.TempDir()
		if _, err := Open(dir); err != nil {
			t.Fatal(err)
		}
		return dir, filepath.Join(dir, KeyFile)
	}
	for _, tc := range []struct {
		name string
		do   func(t *testing.T, dir, key string) error
		want string
	}{
		{"group readable", func(t *testing.T, dir, key string) error { return os.Chmod(key, 0o440) }, "chmod 400"},
		{"other readable", func(t *testing.T, dir, key string) error { return os.Chmod(key, 0o404) }, "chmod 400"},
		{"group writable", func(t *testing.T, dir, key string) error { return os.Chmod(key, 0o620) }, "chmod 400"},
		{"not root's", func(t *testing.T, dir, key string) error { return os.Chown(key, 1000, 1000) }, "owned by root"},
		{"symlink", func(t *testing.T, dir, key string) error {
			if err := os.Rename(key, key+".real"); err != nil {
				return err
			}
			return os.Symlink(key+".real", key)
		}, "symbolic link"},
		{"directory", func(t *testing.T, dir, key string) error {
			if err := os.Remove(key); err != nil {
				return err
			}
			return os.Mkdir(key, 0o700)
		}, "not a regular file"},
		{"short", func(t *testing.T, dir, key string) error {
			if err := os.Remove(key); err != nil {
				return err
			}
			return os.WriteFile(key, []byte("short"), 0o400)
		}, "not a 32-byte key"},
		{"missing with data", func(t *testing.T, dir, key string) error {
			if err := os.WriteFile(filepath.Join(dir, DataFile), []byte(`{"version":1,"secrets":{}}`), 0o600); err != nil {
				return err
			}
			return os.Remove(key)
		}, "is missing but"},
		{"data dir open to others", func(t *testing.T, dir, key string) error { return os.Chmod(dir, 0o777) }, "not writable by group or others"},
		{"data dir not root's", func(t *testing.T, dir, key string) error { return os.Chown(dir, 1000, 1000) }, "owned by root"},
		{"data file corrupt", func(t *testing.T, dir, key string) error {
			return os.WriteFile(filepath.Join(dir, DataFile), []byte(`{"version":`), 0o600)
		}, "does not parse"},
		{"data file of another version", func(t *testing.T, dir, key string) error {
			return os.WriteFile(filepath.Join(dir, DataFile), []byte(`{"version":9}`), 0o600)
		}, "version 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, key := setup(t)
			if err := tc.do(t, dir, key); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// A data directory that does not exist is an error, not created.
	if _, err := Open(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a missing dir: %v", err)
	}
}

func TestInvalidInput(t *testing.T) {
	s, _ := newStore(t)
	for _, name := range []string{"", "lower", "1ABC", "A-B", "A B", "A=B", "Ä", strings.Repeat("A", 65), "ghp_secretlooking"} {
		for op, err := range map[string]error{
			"Set":    s.Set(name, NewValue("v")),
			"Delete": s.Delete(name),
			"Get":    func() error { _, err := s.Get(name); return err }(),
		} {
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), NameRule) {
				t.Errorf("%s(%q): %v", op, name, err)
			}
			if name != "" && strings.Contains(err.Error(), name) {
				t.Errorf("%s(%q): the error repeats the name: %v", op, name, err)
			}
		}
	}
	const big = "secret-bytes-"
	for _, v := range []Value{{}, NewValue(""), NewValue(strings.Repeat(big, MaxValueBytes/len(big)+1))} {
		err := s.Set("OK", v)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || strings.Contains(err.Error(), big) {
			t.Errorf("Set of a %d-byte value: %v", len(v.Reveal()), err)
		}
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Fatalf("invalid input was stored: %v", list)
	}
}

// TestConcurrent: Set, Get, List and Delete from many goroutines, through two Stores on
// the same directory (as two moat processes would); no update is lost.
func TestConcurrent(t *testing.T) {
	s1, dir := newStore(t)
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 8, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := s1
			if w%2 == 1 {
				s = s2
			}
			for i := range rounds {
				name := fmt.Sprintf("W%d_%d", w, i)
				if err := s.Set(name, NewValue(name+"-value")); err != nil {
					t.Error(err)
					return
				}
				if err := s.Set("SHARED", NewValue("shared")); err != nil {
					t.Error(err)
					return
				}
				if v, err := s.Get(name); err != nil || v.Reveal() != name+"-value" {
					t.Errorf("Get %s: %v", name, err)
					return
				}
				if _, err := s.List(); err != nil {
					t.Error(err)
					return
				}
			}
			if err := s.Delete(fmt.Sprintf("W%d_0", w)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	list, err := s1.List()
	if err != nil {
		t.Fatal(err)
	}
	if want := workers*(rounds-1) + 1; len(list) != want {
		t.Fatalf("%d secrets, want %d", len(list), want)
	}
	if got := mustGet(t, s2, "SHARED"); got != "shared" {
		t.Fatal(got)
	}
}

func TestGitHubAppSecret(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	app := GitHubApp{AppID: "123", InstallationID: 45, APIURL: "https://ghe.example.test/api/v3"}
	if err := s.SetGitHubApp("GH_APP", NewValue("-----BEGIN RSA PRIVATE KEY-----"), app); err != nil {
		t.Fatal(err)
	}
	v, info, err := s.Lookup("GH_APP")
	if err != nil || info.GitHubApp == nil || *info.GitHubApp != app || v.Reveal() != "-----BEGIN RSA PRIVATE KEY-----" {
		t.Fatalf("Lookup = %+v, %v", info, err)
	}
	list, _ := s.List()
	if len(list) != 1 || list[0].GitHubApp == nil || list[0].GitHubApp.AppID != "123" {
		t.Errorf("List = %+v", list)
	}
	// The App is bound to the sealed key: pointing it elsewhere in the file breaks it.
	path := filepath.Join(dir, DataFile)
	data, _ := os.ReadFile(path)
	os.WriteFile(path, bytes.Replace(data, []byte("ghe.example.test"), []byte("evil.example.test"), 1), 0o600)
	if _, err := s.Get("GH_APP"); err == nil || !strings.Contains(err.Error(), "does not decrypt") {
		t.Errorf("Get after the App was altered: %v", err)
	}
	// Set replaces the kind too.
	if err := s.Set("GH_APP", NewValue("plain")); err != nil {
		t.Fatal(err)
	}
	if _, info, _ := s.Lookup("GH_APP"); info.GitHubApp != nil {
		t.Errorf("Set kept the App: %+v", info)
	}
	if _, _, err := s.Lookup("NOPE"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Lookup(NOPE) = %v", err)
	}
}
