package safegit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// ChangeReport is what a change from Base to Tip does; `moat changes --json` prints it.
// Every string in it (names, e-mails, subjects, paths) is sandbox-controlled: a terminal
// printer must escape control characters.
type ChangeReport struct {
	Base string `json:"base,omitempty"` // "" for a new branch
	Tip  string `json:"tip"`
	// FastForward: Tip descends from Base (always true for a new branch).
	FastForward bool `json:"fast_forward"`
	// Commits reachable from Tip and not from Base, newest first, at most MaxCommits.
	Commits          []Commit `json:"commits"`
	CommitsTruncated bool     `json:"commits_truncated,omitempty"`
	// Files changed between Base's tree and Tip's (renames detected), at most MaxFiles.
	Files          []FileChange `json:"files"`
	FilesTruncated bool         `json:"files_truncated,omitempty"`
	// Lockfiles are the paths of Files that are dependency lockfiles (IsLockfile).
	Lockfiles []string `json:"lockfiles,omitempty"`
}

// Commit is one commit of a report.
type Commit struct {
	ID             string   `json:"id"`
	Parents        []string `json:"parents,omitempty"`
	AuthorName     string   `json:"author_name"`
	AuthorEmail    string   `json:"author_email"`
	AuthorDate     string   `json:"author_date"` // strict ISO 8601, as git printed it
	CommitterName  string   `json:"committer_name"`
	CommitterEmail string   `json:"committer_email"`
	CommitterDate  string   `json:"committer_date"`
	Subject        string   `json:"subject"` // the message's first line
}

// FileChange is one path of a report. Binary files have no line counts.
type FileChange struct {
	Path     string `json:"path"`
	OldPath  string `json:"old_path,omitempty"` // set for a rename or copy
	Added    int64  `json:"added"`
	Removed  int64  `json:"removed"`
	Binary   bool   `json:"binary,omitempty"`
	Lockfile bool   `json:"lockfile,omitempty"`
}

// emptyTree is the id of the empty tree (SHA-1), the base of a new branch's diff.
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// Report describes the change from base to tip, both commits present in the quarantine.
// base "" (or all zeros) is a new branch. Bad ids are errdefs.ErrInvalidArgument; a commit
// missing from the quarantine errdefs.ErrNotFound.
func (q *Quarantine) Report(ctx context.Context, base, tip string) (ChangeReport, error) {
	base, err := q.checkPair(ctx, base, tip)
	if err != nil {
		return ChangeReport{}, fmt.Errorf("change report: %w", err)
	}
	rep := ChangeReport{Base: base, Tip: tip, FastForward: true}
	if base != "" {
		_, err := q.run(ctx, invocation{args: []string{"merge-base", "--is-ancestor", base, tip}, okCodes: []int{1}})
		var ec exitCode
		switch {
		case errors.As(err, &ec):
			rep.FastForward = false
		case err != nil:
			return ChangeReport{}, fmt.Errorf("change report: %w", err)
		}
	}

	logArgs := []string{"log", "-z", "--no-color", "--no-decorate", "--no-mailmap", "--no-show-signature", "--no-notes",
		"--format=" + logFormat, fmt.Sprintf("--max-count=%d", q.opt.MaxCommits+1), "--end-of-options", tip}
	if base != "" {
		logArgs = append(logArgs, "^"+base)
	}
	out, err := q.run(ctx, invocation{args: append(logArgs, "--")})
	if err != nil {
		return ChangeReport{}, fmt.Errorf("change report: %w", err)
	}
	if rep.Commits, err = ParseLog(out); err != nil {
		return ChangeReport{}, fmt.Errorf("change report: %w", err)
	}
	if len(rep.Commits) > q.opt.MaxCommits {
		rep.Commits, rep.CommitsTruncated = rep.Commits[:q.opt.MaxCommits], true
	}

	from := base
	if from == "" {
		from = emptyTree
	}
	out, err = q.run(ctx, invocation{args: []string{"diff-tree", "-r", "-z", "--numstat", "-M", "--no-color", "--no-ext-diff", "--no-textconv", "--end-of-options", from, tip, "--"}})
	if err != nil {
		return ChangeReport{}, fmt.Errorf("change report: %w", err)
	}
	if rep.Files, err = ParseNumstat(out); err != nil {
		return ChangeReport{}, fmt.Errorf("change report: %w", err)
	}
	if len(rep.Files) > q.opt.MaxFiles {
		rep.Files, rep.FilesTruncated = rep.Files[:q.opt.MaxFiles], true
	}
	for i := range rep.Files {
		if IsLockfile(rep.Files[i].Path) || rep.Files[i].OldPath != "" && IsLockfile(rep.Files[i].OldPath) {
			rep.Files[i].Lockfile = true
			rep.Lockfiles = append(rep.Lockfiles, rep.Files[i].Path)
		}
	}
	if rep.Commits == nil {
		rep.Commits = []Commit{}
	}
	if rep.Files == nil {
		rep.Files = []FileChange{}
	}
	return rep, nil
}

// Patch returns the whole change from base to tip as one diff (`git diff-tree -p --binary
// --full-index -M`, applicable with `git apply`), at most MaxPatchBytes
// (errdefs.ErrResourceExhausted beyond). base "" is a new branch.
func (q *Quarantine) Patch(ctx context.Context, base, tip string) (io.Reader, error) {
	base, err := q.checkPair(ctx, base, tip)
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	if base == "" {
		base = emptyTree
	}
	out, err := q.run(ctx, invocation{
		args:   []string{"diff-tree", "-p", "--binary", "--full-index", "-M", "--no-color", "--no-ext-diff", "--no-textconv", "--end-of-options", base, tip, "--"},
		maxOut: q.opt.MaxPatchBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	return bytes.NewReader(out), nil
}

// checkPair validates base and tip and checks both are commits in the quarantine; it
// returns base with the all-zero id as "".
func (q *Quarantine) checkPair(ctx context.Context, base, tip string) (string, error) {
	if strings.Trim(base, "0") == "" {
		base = ""
	}
	for _, id := range []string{base, tip} {
		if id == "" && id == base {
			continue
		}
		ok, err := q.HasCommit(ctx, id)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fmt.Errorf("commit %s: %w", id, errdefs.ErrNotFound)
		}
	}
	return base, nil
}

// logFormat: nine NUL-terminated fields per commit (git -z ends each record with another NUL
// where %x00 would be ambiguous; with a fixed field count it is not).
const logFormat = "%H%x00%P%x00%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%s"

const logFields = 9

// ParseLog parses the output of `git log -z --format=logFormat`: records of nine
// NUL-separated fields, records separated by NUL. It is pure; malformed input is
// errdefs.ErrInvalidArgument.
func ParseLog(b []byte) ([]Commit, error) {
	if len(b) == 0 {
		return nil, nil
	}
	b = bytes.TrimSuffix(b, []byte{0})
	f := strings.Split(string(b), "\x00")
	if len(f)%logFields != 0 {
		return nil, fmt.Errorf("log: %d fields: %w", len(f), errdefs.ErrInvalidArgument)
	}
	var out []Commit
	for i := 0; i < len(f); i += logFields {
		r := f[i : i+logFields]
		if err := CheckObjectID(r[0]); err != nil {
			return nil, fmt.Errorf("log: %w", err)
		}
		c := Commit{ID: r[0], AuthorName: r[2], AuthorEmail: r[3], AuthorDate: r[4],
			CommitterName: r[5], CommitterEmail: r[6], CommitterDate: r[7], Subject: r[8]}
		if r[1] != "" {
			c.Parents = strings.Split(r[1], " ")
			for _, p := range c.Parents {
				if err := CheckObjectID(p); err != nil {
					return nil, fmt.Errorf("log: parent: %w", err)
				}
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// ParseNumstat parses `git diff-tree -z --numstat [-M]` output: per file
// "ADDED\tREMOVED\tPATH\0", or for a rename "ADDED\tREMOVED\t\0OLD\0NEW\0"; binary files
// count "-\t-". diff-tree's first line may be the commit id (when given one commit); it
// is not expected here and is an error. It is pure; malformed input is
// errdefs.ErrInvalidArgument.
func ParseNumstat(b []byte) ([]FileChange, error) {
	bad := func(why string) error { return fmt.Errorf("numstat: %s: %w", why, errdefs.ErrInvalidArgument) }
	var out []FileChange
	for len(b) > 0 {
		// ADDED \t REMOVED \t
		t1 := bytes.IndexByte(b, '\t')
		if t1 < 0 {
			return nil, bad("no counts")
		}
		t2 := bytes.IndexByte(b[t1+1:], '\t')
		if t2 < 0 {
			return nil, bad("no counts")
		}
		t2 += t1 + 1
		var fc FileChange
		added, removed := string(b[:t1]), string(b[t1+1:t2])
		if added == "-" && removed == "-" {
			fc.Binary = true
		} else {
			var err1, err2 error
			fc.Added, err1 = strconv.ParseInt(added, 10, 64)
			fc.Removed, err2 = strconv.ParseInt(removed, 10, 64)
			if err1 != nil || err2 != nil || fc.Added < 0 || fc.Removed < 0 || added[0] == '+' || removed[0] == '+' {
				return nil, bad("counts")
			}
		}
		b = b[t2+1:]
		next := func() (string, bool) {
			i := bytes.IndexByte(b, 0)
			if i <= 0 {
				return "", false
			}
			s := string(b[:i])
			b = b[i+1:]
			return s, true
		}
		if len(b) > 0 && b[0] == 0 { // rename: empty path, then old and new
			b = b[1:]
			old, ok1 := next()
			nw, ok2 := next()
			if !ok1 || !ok2 {
				return nil, bad("rename paths")
			}
			fc.OldPath, fc.Path = old, nw
		} else {
			p, ok := next()
			if !ok {
				return nil, bad("path")
			}
			fc.Path = p
		}
		out = append(out, fc)
	}
	return out, nil
}
