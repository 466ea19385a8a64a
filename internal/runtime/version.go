package runtime

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The runtime versions `make deps` builds into DefaultDir (scripts/runtimes.sh pins the
// same; TestPinnedVersionsMatchScript keeps them equal).
const (
	PinnedRunc  = "v1.5.3"
	PinnedRunsc = "v0.0.0-20260905035102-160fafc42237" // gVisor's Go branch of 2026-09-05
)

// Version is what a runtime's `--version` says, parsed. runc and crun have release
// numbers; runsc has only a build date.
type Version struct {
	Runtime             string
	Line                string // the first line, as printed
	Major, Minor, Patch int
	RC                  int       // n of "-rc.n"; 0 for a release
	Date                time.Time // runsc: the day of the gVisor source it was built from
}

// String is the version without its runtime name: "1.5.3", "1.4.0-rc.3", or for runsc
// the build day "2022-12-19".
func (v Version) String() string {
	if v.Runtime == "runsc" {
		return v.Date.Format(time.DateOnly)
	}
	s := fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.RC > 0 {
		s += fmt.Sprintf("-rc.%d", v.RC)
	}
	return s
}

var (
	semverRE = regexp.MustCompile(`^v?(\d{1,6})\.(\d{1,6})\.(\d{1,6})(?:-rc\.?(\d{1,6}))?(?:[-+~][0-9A-Za-z.+~-]*)?$`)
	// runsc version strings: Google's releases ("release-20221212.0"), Debian's package
	// ("0~20221219.0"), and Go pseudo-versions of gVisor's go branch, which moat builds
	// ("v0.0.0-20260905035102-160fafc42237").
	runscDateRE = []*regexp.Regexp{
		regexp.MustCompile(`^release-(\d{8})\.\d{1,6}(?:[-+][0-9A-Za-z.-]*)?$`),
		regexp.MustCompile(`^0(?:\.0)?~(\d{8})(?:\.\d{1,6})?(?:[-+~][0-9A-Za-z.+~-]*)?$`),
		regexp.MustCompile(`^v0\.0\.0-(\d{8})\d{6}-[0-9a-f]{12}$`),
	}
)

// ParseVersion parses the output of `<runtime> --version` for runtime name ("runc",
// "crun" or "runsc"). It fails on anything it does not recognise; it never panics, whatever
// the bytes.
func ParseVersion(name string, out []byte) (Version, error) {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	line = strings.TrimSpace(line)
	v := Version{Runtime: name, Line: line}
	word, ok := strings.CutPrefix(line, name+" version ")
	if !ok || !slices.Contains(Names(), name) {
		return v, fmt.Errorf("%s --version: unrecognised %q", name, line)
	}
	word = strings.TrimSpace(word)
	if name == "runsc" {
		for _, re := range runscDateRE {
			m := re.FindStringSubmatch(word)
			if m == nil {
				continue
			}
			d, err := time.Parse("20060102", m[1])
			if err != nil {
				return v, fmt.Errorf("runsc --version: bad date in %q", word)
			}
			v.Date = d
			return v, nil
		}
		return v, fmt.Errorf("runsc --version: unrecognised version %q", word)
	}
	m := semverRE.FindStringSubmatch(word)
	if m == nil {
		return v, fmt.Errorf("%s --version: unrecognised version %q", name, word)
	}
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	v.Patch, _ = strconv.Atoi(m[3])
	if m[4] != "" {
		v.RC, _ = strconv.Atoi(m[4])
		if v.RC == 0 {
			v.RC = 1 // "-rc0": still before the release
		}
	}
	return v, nil
}

// compareVersions orders two release versions; a release candidate comes before its
// release.
func compareVersions(a, b Version) int {
	for _, d := range []int{a.Major - b.Major, a.Minor - b.Minor, a.Patch - b.Patch} {
		if d != 0 {
			return d
		}
	}
	switch {
	case a.RC == b.RC:
		return 0
	case a.RC == 0:
		return 1
	case b.RC == 0:
		return -1
	}
	return a.RC - b.RC
}

// fix is one security fix of a runtime: the first version carrying it on each release
// branch that got it.
type fix struct {
	id, severity, what string
	fixedIn            []string
}

// knownFixes are the security fixes moat knows of, per runtime, from the runtimes' own
// changelogs (runc: CHANGELOG.md of v1.5.3; crun: NEWS of 1.4.5). A function, not a
// table variable: nothing may change it.
func knownFixes(name string) []fix {
	switch name {
	case "runc":
		return []fix{
			{"CVE-2024-21626", "high", "container breakout through a leaked host directory descriptor (process.cwd /proc/self/fd/N)", []string{"1.1.12"}},
			{"CVE-2024-45310", "low", "a container could create empty files and directories on the host", []string{"1.1.14", "1.2.0-rc.3"}},
			{"CVE-2025-31133", "high", "container breakout: a /dev/null symlink turns masked paths into writable procfs files", []string{"1.2.8", "1.3.3", "1.4.0-rc.3"}},
			{"CVE-2025-52565", "high", "container breakout: a /dev/pts symlink redirects the /dev/console bind mount", []string{"1.2.8", "1.3.3", "1.4.0-rc.3"}},
			{"CVE-2025-52881", "high", "container breakout: racing mounts redirect runc's writes to arbitrary /proc files (LSM labels, sysctls)", []string{"1.2.8", "1.3.3", "1.4.0-rc.3"}},
			{"CVE-2026-41579", "low", "an image's /dev symlink gave limited writes to the host filesystem", []string{"1.5.0-rc.3"}},
			{"CVE-2026-119101", "high", "runc restore could bind-mount a host directory read-write into a restored container (checkpoint/restore only)", []string{"1.5.3"}},
		}
	case "crun":
		return []fix{
			{"CVE-2022-27650", "medium", "processes got non-empty inheritable capabilities", []string{"1.4.5"}},
		}
	}
	return nil
}

// MissingFix is a known security fix a runtime build lacks.
type MissingFix struct {
	ID       string `json:"id"`
	Severity string `json:"severity"`
	What     string `json:"what"`
	FixedIn  string `json:"fixed_in"` // the versions that have it, e.g. "1.2.8, 1.3.3, 1.4.0-rc.3"
}

// RunscMaxAge is how much older than the pinned runsc a runsc build may be before the
// doctor reports the gVisor fixes it lacks.
const RunscMaxAge = 365 * 24 * time.Hour

// MissingFixes returns the known security fixes runtime build v lacks, most important
// first as listed. backported are the CVE ids a distribution patched into its build (from
// its changelog, DistroFixes): those are not missing. For runsc, which has no release
// numbers, a build more than RunscMaxAge older than PinnedRunsc is reported as missing
// the gVisor fixes of the years between. Pure.
func MissingFixes(v Version, backported []string) []MissingFix {
	if v.Runtime == "runsc" {
		pinned, err := ParseVersion("runsc", []byte("runsc version "+PinnedRunsc))
		if err != nil || v.Date.IsZero() || pinned.Date.Sub(v.Date) <= RunscMaxAge {
			return nil
		}
		years := pinned.Date.Sub(v.Date).Hours() / 24 / 365.25
		return []MissingFix{{
			ID:       "gVisor fixes after " + v.String(),
			Severity: "high",
			What: fmt.Sprintf("built from gVisor of %s: about %.1f years of gVisor security fixes are missing (moat pins %s)",
				v.String(), math.Floor(years*10)/10, pinned.String()),
			FixedIn: "runsc " + PinnedRunsc,
		}}
	}
	var out []MissingFix
	for _, f := range knownFixes(v.Runtime) {
		if slices.Contains(backported, f.id) || hasFix(v, f.fixedIn) {
			continue
		}
		out = append(out, MissingFix{ID: f.id, Severity: f.severity, What: f.what, FixedIn: strings.Join(f.fixedIn, ", ")})
	}
	return out
}

// Backported returns the known fixes release v lacks by its version but which its
// distribution patched in (backported, from DistroFixes): what MissingFixes leaves out for
// that reason. Pure.
func Backported(v Version, backported []string) []string {
	var out []string
	for _, f := range knownFixes(v.Runtime) {
		if !hasFix(v, f.fixedIn) && slices.Contains(backported, f.id) {
			out = append(out, f.id)
		}
	}
	return out
}

// hasFix reports whether release v carries a fix first released in fixedIn (one version
// per release branch major.minor that got it). A branch newer than every listed one was cut
// after the fix and has it; a branch older than or between the listed ones without an
// entry did not get it.
func hasFix(v Version, fixedIn []string) bool {
	newest := true
	for _, s := range fixedIn {
		f, err := ParseVersion(v.Runtime, []byte(v.Runtime+" version "+s))
		if err != nil {
			continue
		}
		if f.Major == v.Major && f.Minor == v.Minor {
			return compareVersions(v, f) >= 0
		}
		if f.Major > v.Major || (f.Major == v.Major && f.Minor > v.Minor) {
			newest = false
		}
	}
	return newest
}

var cveRE = regexp.MustCompile(`CVE-\d{4}-\d{4,7}`)

// CVEsIn returns the CVE ids text mentions, each once, in order. Pure.
func CVEsIn(text []byte) []string {
	var out []string
	for _, m := range cveRE.FindAll(text, -1) {
		if s := string(m); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// DistroFixes returns the CVE ids the distribution package of the runtime binary at path
// names in its changelog (Debian: /usr/share/doc/<name>/changelog.Debian.gz, whose entries
// are the installed version and those before it): fixes it backported into a build whose
// version number predates them. A binary in moat's own directory, or without such a
// changelog, has none.
func DistroFixes(name, path string) []string {
	if !slices.Contains(systemDirs(), filepath.Dir(path)) {
		return nil
	}
	f, err := os.Open(filepath.Join("/usr/share/doc", name, "changelog.Debian.gz"))
	if err != nil {
		return nil
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil
	}
	data, _ := io.ReadAll(io.LimitReader(zr, 4<<20))
	return CVEsIn(data)
}

// binaryVersion asks the runtime binary at bin its version; the zero Version (and a warning)
// when it does not answer or is not understood.
func binaryVersion(name, bin string, log *slog.Logger) Version {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := ask(ctx, bin, "--version")
	if err == nil {
		var v Version
		if v, err = ParseVersion(name, out); err == nil {
			return v
		}
	}
	log.Warn("runtime version unknown: the spec is the one every build accepts", "binary", bin, "err", err)
	return Version{Runtime: name}
}

// Stamp reads the version stamp scripts/runtimes.sh writes beside a runtime it builds
// (<dir>/<name>.version); "" when there is none.
func Stamp(dir, name string) string {
	data, err := os.ReadFile(filepath.Join(dir, name+".version"))
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(data))
}

// Pinned returns the version moat pins for runtime name ("" for crun, which it does not
// build).
func Pinned(name string) string {
	switch name {
	case "runc":
		return PinnedRunc
	case "runsc":
		return PinnedRunsc
	}
	return ""
}

// RunscPlatforms lists the platforms a runsc build offers, from its `runsc flags` output
// ("specifies which platform to use: systrap (default), ptrace, kvm."). Pure.
func RunscPlatforms(flags []byte) []string {
	for _, l := range strings.Split(string(flags), "\n") {
		_, rest, ok := strings.Cut(l, "specifies which platform to use:")
		if !ok {
			continue
		}
		rest, _, _ = strings.Cut(rest, ". (default")
		var out []string
		for _, p := range strings.Split(strings.TrimSuffix(strings.TrimSpace(rest), "."), ",") {
			p = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(p), "(default)"))
			if p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	return nil
}
