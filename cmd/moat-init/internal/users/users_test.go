package users

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParsePasswd(t *testing.T) {
	in := strings.Join([]string{
		"root:x:0:0:root:/root:/bin/bash",
		"# a comment",
		"",
		"user:x:1000:1000:User,,,:/home/user:/bin/bash\r",
		"short:x:1:1",
		"badid:x:-1:0::/:/bin/sh",
		"big:x:4294967296:0::/:/bin/sh",
		"+nis::::::",
		":x:5:5::/:/bin/sh",
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
		"maxid:x:4294967295:7:::",
	}, "\n")
	got, err := ParsePasswd(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []PasswdEntry{
		{"root", 0, 0, "/root", "/bin/bash"},
		{"user", 1000, 1000, "/home/user", "/bin/bash"},
		{"nobody", 65534, 65534, "/nonexistent", "/usr/sbin/nologin"},
		{"maxid", 4294967295, 7, "", ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestParseGroup(t *testing.T) {
	in := "root:x:0:\nsudo:x:27:user, other ,\nbad:x:y:user\ndocker:x:999:user\nshort:x:1\n"
	got, err := ParseGroup(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []GroupEntry{
		{"root", 0, nil},
		{"sudo", 27, []string{"user", "other"}},
		{"docker", 999, []string{"user"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestOverlongLinesAreSkipped(t *testing.T) {
	in := "long:x:1:1:" + strings.Repeat("g", 3*maxLine) + ":/:/bin/sh\nok:x:2:2::/:/bin/sh\n"
	got, err := ParsePasswd(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "ok" {
		t.Fatalf("got %+v", got)
	}
}

func writeDB(t *testing.T, passwd, group string) *DB {
	t.Helper()
	dir := t.TempDir()
	pw, gr := filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	if err := os.WriteFile(pw, []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gr, []byte(group), 0o644); err != nil {
		t.Fatal(err)
	}
	return NewDB(pw, gr)
}

func TestLookup(t *testing.T) {
	db := writeDB(t,
		"root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n",
		"root:x:0:\nuser:x:1000:\nsudo:x:27:user\nadm:x:4:other,user\nother:x:5:root\n")
	u, err := db.Lookup("user")
	if err != nil {
		t.Fatal(err)
	}
	want := &User{Name: "user", UID: 1000, GID: 1000, Home: "/home/user", Shell: "/bin/bash", Groups: []uint32{1000, 27, 4}}
	if !reflect.DeepEqual(u, want) {
		t.Fatalf("got %+v, want %+v", u, want)
	}
	if _, err := db.Lookup("ghost"); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("Lookup(ghost) = %v", err)
	}
	if db.UserName(1000) != "user" || db.UserName(4242) != "4242" {
		t.Errorf("UserName: %q %q", db.UserName(1000), db.UserName(4242))
	}
	if db.GroupName(27) != "sudo" || db.GroupName(4242) != "4242" {
		t.Errorf("GroupName: %q %q", db.GroupName(27), db.GroupName(4242))
	}
}

func TestLookupSeesChanges(t *testing.T) {
	db := writeDB(t, "root:x:0:0::/root:/bin/sh\n", "")
	if _, err := db.Lookup("late"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Lookup(late) = %v", err)
	}
	// A different size changes the stamp even within one mtime tick.
	if err := os.WriteFile(db.passwdPath, []byte("root:x:0:0::/root:/bin/sh\nlate:x:7:7::/home/late:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if u, err := db.Lookup("late"); err != nil || u.UID != 7 {
		t.Fatalf("Lookup(late) after adding = %+v, %v", u, err)
	}
}

func TestMissingFiles(t *testing.T) {
	db := NewDB("/nonexistent/passwd", "/nonexistent/group")
	if _, err := db.Lookup("root"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("got %v", err)
	}
}

// format writes entries back as passwd lines.
func formatPasswd(es []PasswdEntry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "%s:x:%d:%d::%s:%s\n", e.Name, e.UID, e.GID, e.Home, e.Shell)
	}
	return b.String()
}

// FuzzParsePasswd checks that any input parses without panicking into
// entries with valid names, and that printing and re-parsing them is
// stable.
func FuzzParsePasswd(f *testing.F) {
	f.Add("root:x:0:0:root:/root:/bin/bash\n")
	f.Add("user:x:1000:1000:User,,,:/home/user:/bin/bash\r\n# c\n\n+::::::\n")
	f.Fuzz(func(t *testing.T, in string) {
		es, err := ParsePasswd(strings.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if !validName(e.Name) || strings.ContainsAny(e.Name+e.Home+e.Shell, ":\n") {
				t.Fatalf("bad entry %+v", e)
			}
		}
		again, err := ParsePasswd(strings.NewReader(formatPasswd(es)))
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != len(again) {
			t.Fatalf("re-parse: %d entries, then %d", len(es), len(again))
		}
		for i := range es {
			// The trailing \r of a CRLF line is not part of the shell.
			if es[i] != again[i] {
				t.Fatalf("re-parse: %+v, then %+v", es[i], again[i])
			}
		}
	})
}

// FuzzParseGroup checks that any input parses without panicking and that
// members are trimmed and non-empty.
func FuzzParseGroup(f *testing.F) {
	f.Add("sudo:x:27:user,other\n")
	f.Add("root:x:0:\nbad:x:y:z\n")
	f.Fuzz(func(t *testing.T, in string) {
		gs, err := ParseGroup(strings.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			if !validName(g.Name) {
				t.Fatalf("bad group name %q", g.Name)
			}
			for _, m := range g.Members {
				if m == "" || m != strings.TrimSpace(m) || strings.Contains(m, ",") {
					t.Fatalf("bad member %q in %+v", m, g)
				}
			}
		}
	})
}
