package runtime

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		name, out, want string
		ok              bool
	}{
		{"runc", "runc version 1.5.3\nspec: 1.3.0\ngo: go1.26.8\nlibseccomp: 2.5.4\n", "1.5.3", true},
		{"runc", "runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\n", "1.1.5", true},
		{"runc", "runc version 1.4.0-rc.3\n", "1.4.0-rc.3", true},
		{"runc", "runc version 1.2.0-rc.1+dev\n", "1.2.0-rc.1", true},
		{"runc", "runc version 1.3.3-0ubuntu1~24.04.2\n", "1.3.3", true},
		{"runc", "runc version unknown\n", "", false},
		{"runc", "crun version 1.8.1\n", "", false},
		{"crun", "crun version 1.8.1\ncommit: f8a096be060b22ccd3d5f3ebe44108517fbf6c30\n", "1.8.1", true},
		{"runsc", "runsc version v0.0.0-20260905035102-160fafc42237\nspec: 1.2.1\n", "2026-09-05", true},
		{"runsc", "runsc version 0~20221219.0\nspec: 1.0.2-dev\n", "2022-12-19", true},
		{"runsc", "runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n", "2022-12-19", true},
		{"runsc", "runsc version release-20221212.0\nspec: 1.0.2-dev\n", "2022-12-12", true},
		{"runsc", "runsc version release-20240311.0-17-gabcdef\n", "2024-03-11", true},
		{"runsc", "runsc version release-20241399.0\n", "", false}, // no such day
		{"runsc", "runsc version 1.0.0\n", "", false},
		{"docker", "docker version 1.0.0\n", "", false},
		{"runc", "", "", false},
	} {
		v, err := ParseVersion(tc.name, []byte(tc.out))
		if (err == nil) != tc.ok || (tc.ok && v.String() != tc.want) {
			t.Errorf("ParseVersion(%s, %q) = %q, %v; want %q ok=%v", tc.name, tc.out, v.String(), err, tc.want, tc.ok)
		}
	}
}

func ids(ms []MissingFix) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func TestMissingFixes(t *testing.T) {
	const (
		c21626 = "CVE-2024-21626"
		c45310 = "CVE-2024-45310"
		c31133 = "CVE-2025-31133"
		c52565 = "CVE-2025-52565"
		c52881 = "CVE-2025-52881"
		c41579 = "CVE-2026-41579"
		c19101 = "CVE-2026-119101"
	)
	y2025 := []string{c31133, c52565, c52881}
	for _, tc := range []struct {
		name, version string
		backported    []string
		want          []string
	}{
		{"runc", "1.5.3", nil, nil},
		{"runc", "1.5.2", nil, []string{c19101}},
		{"runc", "1.5.0-rc.2", nil, []string{c41579, c19101}},
		{"runc", "1.4.2", nil, []string{c41579, c19101}},
		{"runc", "1.4.0-rc.3", nil, []string{c41579, c19101}},
		{"runc", "1.4.0-rc.2", nil, append(slices.Clone(y2025), c41579, c19101)},
		{"runc", "1.3.3", nil, []string{c41579, c19101}},
		{"runc", "1.3.2", nil, append(slices.Clone(y2025), c41579, c19101)},
		{"runc", "1.2.8", nil, []string{c41579, c19101}},
		{"runc", "1.2.7", nil, append(slices.Clone(y2025), c41579, c19101)},
		{"runc", "1.2.0-rc.2", nil, append([]string{c45310}, append(slices.Clone(y2025), c41579, c19101)...)},
		{"runc", "1.1.14", nil, append(slices.Clone(y2025), c41579, c19101)},
		{"runc", "1.1.12", nil, append([]string{c45310}, append(slices.Clone(y2025), c41579, c19101)...)},
		{"runc", "1.1.5", nil, append([]string{c21626, c45310}, append(slices.Clone(y2025), c41579, c19101)...)},
		// Debian 12's 1.1.5+ds1-1+deb12u1 carries the CVE-2024-21626 fix.
		{"runc", "1.1.5+ds1", []string{c21626, "CVE-2023-27561"}, append([]string{c45310}, append(slices.Clone(y2025), c41579, c19101)...)},
		{"runc", "2.0.0", nil, nil},
		{"crun", "1.8.1", nil, nil},
		{"crun", "1.4.4", nil, []string{"CVE-2022-27650"}},
		{"runsc", "v0.0.0-20260905035102-160fafc42237", nil, nil},
		{"runsc", "release-20251001.0", nil, nil}, // under a year older than the pinned build
		{"runsc", "0.0~20221219.0", nil, []string{"gVisor fixes after 2022-12-19"}},
	} {
		v, err := ParseVersion(tc.name, []byte(tc.name+" version "+tc.version))
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(MissingFixes(v, tc.backported)); !slices.Equal(got, tc.want) {
			t.Errorf("%s %s (backported %v): missing %v, want %v", tc.name, tc.version, tc.backported, got, tc.want)
		}
	}
	old, _ := ParseVersion("runsc", []byte("runsc version 0.0~20221219.0"))
	m := MissingFixes(old, nil)
	if len(m) != 1 || !regexp.MustCompile(`about 3\.7 years of gVisor security fixes`).MatchString(m[0].What) {
		t.Errorf("runsc 2022: %+v", m)
	}
}

func TestBackported(t *testing.T) {
	v, _ := ParseVersion("runc", []byte("runc version 1.1.5+ds1"))
	// Debian's changelog names older CVEs too (fixed by 1.1.5 itself): not reported.
	if got := Backported(v, []string{"CVE-2024-21626", "CVE-2023-27561"}); !slices.Equal(got, []string{"CVE-2024-21626"}) {
		t.Errorf("Backported = %v", got)
	}
	v, _ = ParseVersion("runc", []byte("runc version 1.5.3"))
	if got := Backported(v, []string{"CVE-2024-21626"}); got != nil {
		t.Errorf("a release that has the fix: %v", got)
	}
}

func TestCVEsIn(t *testing.T) {
	got := CVEsIn([]byte("  * CVE-2024-21626: several container breakouts\n + CVE-2023-25809: x\n CVE-2024-21626 again, CVE-20-1 no"))
	if !slices.Equal(got, []string{"CVE-2024-21626", "CVE-2023-25809"}) {
		t.Errorf("CVEsIn = %v", got)
	}
}

func TestRunscPlatforms(t *testing.T) {
	for out, want := range map[string][]string{
		"  -platform string\n    \tspecifies which platform to use: systrap (default), ptrace, kvm. (default \"systrap\")\n": {"systrap", "ptrace", "kvm"},
		"  -platform string\n    \tspecifies which platform to use: ptrace (default), kvm. (default \"ptrace\")\n":           {"ptrace", "kvm"},
		"nothing": nil,
	} {
		if got := RunscPlatforms([]byte(out)); !slices.Equal(got, want) {
			t.Errorf("RunscPlatforms(%q) = %v, want %v", out, got, want)
		}
	}
}

// TestPinnedVersionsMatchScript: the versions the doctor calls pinned are the ones make
// deps builds.
func TestPinnedVersionsMatchScript(t *testing.T) {
	data, err := os.ReadFile("../../scripts/runtimes.sh")
	if err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]string{"RUNC_VERSION": PinnedRunc, "RUNSC_VERSION": PinnedRunsc} {
		m := regexp.MustCompile(`(?m)^` + v + `=(\S+)`).FindSubmatch(data)
		if m == nil || string(m[1]) != want {
			t.Errorf("scripts/runtimes.sh %s = %q, the Go code pins %q", v, m, want)
		}
	}
}

// FuzzParseVersion: any output of a runtime's --version parses or fails, never panics, and
// what parses prints back as a version the parser accepts again.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"runc version 1.5.3\nspec: 1.3.0", "runc version 1.1.5+ds1", "runc version 1.4.0-rc.3",
		"crun version 1.8.1", "runsc version 0~20221219.0", "runsc version v0.0.0-20260905035102-160fafc42237",
		"runsc version release-20221212.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		for _, name := range Names() {
			v, err := ParseVersion(name, []byte(out))
			if err != nil {
				continue
			}
			_ = MissingFixes(v, nil)
			if name == "runsc" {
				continue
			}
			again, err := ParseVersion(name, []byte(name+" version "+v.String()))
			if err != nil || compareVersions(again, v) != 0 {
				t.Fatalf("%s %q: %q reparses as %q, %v", name, out, v.String(), again.String(), err)
			}
		}
	})
}
