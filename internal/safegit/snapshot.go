package safegit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// CommitMeta is the author, committer and message of a snapshot commit.
type CommitMeta struct {
	Name    string    // author and committer name
	Email   string    // author and committer e-mail
	Message string    // the commit message
	When    time.Time // zero: now
}

// SnapshotResult is the commit CommitSnapshot made.
type SnapshotResult struct {
	Commit  string `json:"commit"`
	Files   int    `json:"files"`
	Bytes   int64  `json:"bytes"`
	Skipped int    `json:"skipped"`           // entries that are neither files, links nor directories, and .git
	Ignored int    `json:"ignored,omitempty"` // entries a KeepFunc refused (a directory counts once)
}

// CommitSnapshot commits the directory tree at dir (the sandbox's workspace as visible on
// the host, read-only) on top of base ("" for a root commit) into the quarantine, and
// returns the commit. The tree is exactly dir's regular files (mode 100755 when any
// execute bit is set, else 100644) and symbolic links (their target as a 120000 entry,
// never followed); other entries and every entry named .git (any case, at any depth) are
// skipped. Git never sees dir: moat reads it through an os.Root (nothing outside dir can be
// read even if the sandbox swaps a file for a link) and streams the bytes to `git
// fast-import`, which stores them as they are — no work tree, index, attributes, filters,
// hooks or config from dir are involved. Over MaxSnapshotFiles or MaxSnapshotBytes is
// errdefs.ErrResourceExhausted; a file that changes size while it is read is
// errdefs.ErrConflict. The commit is kept reachable as refs/moat/snapshots/<id>.
func (q *Quarantine) CommitSnapshot(ctx context.Context, dir, base string, meta CommitMeta) (SnapshotResult, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return SnapshotResult{}, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	defer root.Close()
	return q.CommitSnapshotRoot(ctx, root, base, meta, nil)
}

// KeepFunc decides whether CommitSnapshotRoot takes the entry at p (slash-separated,
// relative to the root): for a directory, false skips it and everything below. It is
// called in walk order (a directory before its content).
type KeepFunc func(p string, dir bool) bool

// CommitSnapshotRoot is CommitSnapshot of an already opened root, taking only the entries
// keep accepts (nil: all). Entries keep refuses count as Ignored.
func (q *Quarantine) CommitSnapshotRoot(ctx context.Context, root *os.Root, base string, meta CommitMeta, keep KeepFunc) (SnapshotResult, error) {
	var res SnapshotResult
	dir := root.Name()
	if strings.Trim(base, "0") == "" {
		base = ""
	} else if ok, err := q.HasCommit(ctx, base); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("base %s: %w", base, errdefs.ErrNotFound)
		}
		return res, fmt.Errorf("snapshot: %w", err)
	}
	ident, err := fastImportIdent(meta)
	if err != nil {
		return res, fmt.Errorf("snapshot: %w", err)
	}

	tmpRef := fmt.Sprintf("refs/moat/tmp/snapshot-%d", time.Now().UnixNano())
	pr, pw := io.Pipe()
	walkErr := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(pw, 256<<10)
		err := q.writeSnapshot(w, root, tmpRef, base, ident, meta.Message, keep, &res)
		if err == nil {
			err = w.Flush()
		}
		walkErr <- err
		pw.CloseWithError(err)
	}()
	_, runErr := q.run(ctx, invocation{args: []string{"fast-import", "--quiet", "--done", "--date-format=raw"}, stdin: pr})
	pr.CloseWithError(errors.New("fast-import ended"))
	if err := <-walkErr; err != nil {
		return SnapshotResult{}, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	if runErr != nil {
		return SnapshotResult{}, fmt.Errorf("snapshot %s: %w", dir, runErr)
	}
	out, err := q.run(ctx, invocation{args: []string{"rev-parse", "--verify", "--end-of-options", tmpRef + "^{commit}"}})
	if err != nil {
		return SnapshotResult{}, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	res.Commit = strings.TrimSpace(string(out))
	if _, err := q.run(ctx, invocation{args: []string{"update-ref", "refs/moat/snapshots/" + res.Commit, res.Commit}}); err != nil {
		return SnapshotResult{}, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	if _, err := q.run(ctx, invocation{args: []string{"update-ref", "-d", tmpRef}}); err != nil {
		return SnapshotResult{}, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	q.log.Info("quarantine snapshot", "dir", q.dir, "commit", res.Commit, "files", res.Files, "bytes", res.Bytes, "skipped", res.Skipped)
	return res, nil
}

// writeSnapshot writes the fast-import stream of one commit whose tree is root's content.
func (q *Quarantine) writeSnapshot(w *bufio.Writer, root *os.Root, ref, base, ident, msg string, keep KeepFunc, res *SnapshotResult) error {
	fmt.Fprintf(w, "commit %s\nauthor %s\ncommitter %s\ndata %d\n%s\n", ref, ident, ident, len(msg), msg)
	if base != "" {
		fmt.Fprintf(w, "from %s\n", base)
	}
	w.WriteString("deleteall\n")
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if strings.EqualFold(d.Name(), ".git") {
			res.Skipped++
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if keep != nil && !keep(p, d.IsDir()) {
			res.Ignored++
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		switch t := d.Type(); {
		case t.IsDir():
			return nil
		case t&fs.ModeSymlink != 0:
			target, err := root.Readlink(p)
			if err != nil {
				return err
			}
			return q.inline(w, res, "120000", p, int64(len(target)), strings.NewReader(target))
		case t.IsRegular():
			return q.addFile(w, root, p, res)
		default:
			res.Skipped++
			return nil
		}
	})
	if err != nil {
		return err
	}
	_, err = w.WriteString("\ndone\n")
	return err
}

func (q *Quarantine) addFile(w *bufio.Writer, root *os.Root, p string, res *SnapshotResult) error {
	f, err := root.OpenFile(p, os.O_RDONLY|syscallONoFollow, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() { // swapped since the walk read the directory
		res.Skipped++
		return nil
	}
	mode := "100644"
	if st.Mode().Perm()&0o111 != 0 {
		mode = "100755"
	}
	return q.inline(w, res, mode, p, st.Size(), f)
}

// inline writes one file of n bytes from r as an inline M command.
func (q *Quarantine) inline(w *bufio.Writer, res *SnapshotResult, mode, p string, n int64, r io.Reader) error {
	res.Files++
	res.Bytes += n
	if res.Files > q.opt.MaxSnapshotFiles {
		return fmt.Errorf("over %d files: %w", q.opt.MaxSnapshotFiles, errdefs.ErrResourceExhausted)
	}
	if res.Bytes > q.opt.MaxSnapshotBytes {
		return fmt.Errorf("over %d bytes: %w", q.opt.MaxSnapshotBytes, errdefs.ErrResourceExhausted)
	}
	fmt.Fprintf(w, "M %s inline %s\ndata %d\n", mode, QuotePath(path.Clean(p)), n)
	got, err := io.Copy(w, io.LimitReader(r, n))
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("%s changed while read: %w", p, errdefs.ErrConflict)
	}
	_, err = w.WriteString("\n")
	return err
}

// fastImportIdent is "Name <email> unix-seconds +zzzz" for fast-import's raw date format.
func fastImportIdent(m CommitMeta) (string, error) {
	for _, s := range []string{m.Name, m.Email} {
		if s == "" || strings.ContainsAny(s, "<>\n\x00") {
			return "", fmt.Errorf("commit identity %q: %w", s, errdefs.ErrInvalidArgument)
		}
	}
	if strings.ContainsRune(m.Message, 0) {
		return "", fmt.Errorf("commit message has NUL: %w", errdefs.ErrInvalidArgument)
	}
	when := m.When
	if when.IsZero() {
		when = time.Now()
	}
	_, off := when.Zone()
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	return fmt.Sprintf("%s <%s> %d %c%02d%02d", m.Name, m.Email, when.Unix(), sign, off/3600, off%3600/60), nil
}

// QuotePath quotes a path for a fast-import command the way git's C-style quoting does:
// unchanged when it needs no quoting; otherwise in double quotes with \", \\, \t, \n and
// octal escapes for every other byte below 0x20, 0x7f and above. It is pure.
func QuotePath(p string) string {
	need := p == "" || p[0] == '"'
	for i := 0; i < len(p) && !need; i++ {
		c := p[i]
		need = c < 0x20 || c >= 0x7f || c == '\\'
	}
	if !need {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c >= 0x7f:
			b.WriteByte('\\')
			s := strconv.FormatInt(int64(c), 8)
			b.WriteString(strings.Repeat("0", 3-len(s)) + s)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
