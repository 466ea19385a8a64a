package main

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/moatdev/moat/internal/tarcopy"
	"github.com/moatdev/moat/sdk"
)

// copyResult is what `moat cp --json` prints.
type copyResult struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
	Skipped int   `json:"skipped,omitempty"` // devices, FIFOs and sockets left out
}

func (a *app) cpCmd() *cobra.Command {
	var user, maxSize string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files or directories into or out of a sandbox (ID:PATH on one side; - is stdin/stdout)",
		Long: `cp copies a file or a directory tree. Exactly one of SRC and DST is ID:PATH in a sandbox.
The path inside is resolved by the sandbox's own moat-init, in the sandbox's mount namespace:
it can never reach host files. A relative path inside is relative to the user's home.

As cp -r does: when DST is an existing directory the copy goes into it under SRC's name,
otherwise it becomes DST (a DST ending in / is a directory, made inside a sandbox when
missing). Modes are kept (their permission bits: set-user-ID, set-group-ID and sticky bits
are dropped), and so are modification times; symlinks below SRC are copied as links,
never followed; devices, FIFOs and sockets are left out, with a warning. Copied files belong
to whoever copies: the user inside (--user), or you on the host.

Out of a sandbox, the tree is made by the sandbox and not trusted: an entry that would land
outside DST (an absolute name, "..", or a path through a symlink the copy made) stops the
copy, a new DST appears only once the copy is whole (it is made under a temporary name
beside DST and renamed), and no more than --max-size is written. SRC that is a device, a
FIFO or a socket is refused. With DST "-", SRC must be a regular file and its content goes
to stdout; with SRC "-", stdin becomes the file DST.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcID, srcPath, srcRemote := splitRemote(args[0])
			dstID, dstPath, dstRemote := splitRemote(args[1])
			if srcRemote == dstRemote {
				return errors.New("cp: exactly one of SRC and DST must be ID:PATH")
			}
			limit, err := parseSize(maxSize)
			if err != nil {
				return fmt.Errorf("--max-size: %w", err)
			}
			if !srcRemote && srcPath != "-" {
				if _, err := os.Stat(srcPath); err != nil {
					return fmt.Errorf("cp: %w", err)
				}
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var res copyResult
			switch {
			case srcRemote && dstPath == "-":
				return copyFileOut(ctx, c, srcID, srcPath, user, limit, maxSize)
			case srcRemote:
				if res, err = copyOut(ctx, c, srcID, srcPath, user, dstPath, limit); err != nil {
					return fmt.Errorf("cp: %w", err)
				}
			case srcPath == "-":
				return c.WriteFile(ctx, dstID, dstPath, user, os.Stdin)
			default:
				if res, err = copyIn(ctx, c, srcPath, dstID, dstPath, user); err != nil {
					return fmt.Errorf("cp: %w", err)
				}
			}
			if res.Skipped > 0 {
				fmt.Fprintf(os.Stderr, "moat: cp: %d device(s), FIFO(s) or socket(s) left out\n", res.Skipped)
			}
			if asJSON {
				return printJSON(res)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "user inside whose permissions apply (default: the sandbox's user)")
	cmd.Flags().StringVar(&maxSize, "max-size", "4G", "most to write on the host when copying out of a sandbox: file contents plus 512 bytes per entry (0: no limit)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was copied as JSON (entries, bytes, skipped)")
	return cmd
}

// copyFileOut writes the regular file srcPath of sandbox id to stdout, bounded by the
// length the sandbox announces and by limit.
func copyFileOut(ctx context.Context, c *sdk.Client, id, srcPath, user string, limit int64, maxSize string) error {
	rc, err := c.ReadFile(ctx, id, srcPath, user)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer rc.Close()
	if limit > 0 && rc.Size > limit {
		return fmt.Errorf("cp: %s is %d bytes, more than --max-size %s; nothing was written (raise --max-size, 0: no limit)", srcPath, rc.Size, maxSize)
	}
	_, err = io.Copy(os.Stdout, rc)
	return err
}

// copyOut copies the file or tree srcPath of sandbox id to dst on the host (cp -r
// rules: into dst when it is a directory, else as dst). A new destination is extracted
// under a temporary name beside it and renamed when whole; a copy into an existing
// directory merges, and what it made stays if it fails.
func copyOut(ctx context.Context, c *sdk.Client, id, srcPath, user, dst string, limit int64) (copyResult, error) {
	parent, top := dst, ""
	fi, err := os.Stat(dst)
	switch {
	case err == nil && fi.IsDir():
	case strings.HasSuffix(dst, "/"):
		return copyResult{}, fmt.Errorf("%s: no such directory", dst)
	case err == nil || errors.Is(err, fs.ErrNotExist):
		parent, top = filepath.Dir(dst), filepath.Base(dst)
	default:
		return copyResult{}, err
	}
	root, err := os.OpenRoot(parent)
	if err != nil {
		return copyResult{}, err
	}
	defer root.Close()
	ts, err := c.ReadTar(ctx, id, srcPath, user)
	if err != nil {
		return copyResult{}, err
	}
	defer ts.Close()
	rd, stop := withProgress("cp: "+srcPath, ts)
	defer stop()
	tmp := ""
	if top != "" {
		tmp = tempName()
		defer root.RemoveAll(tmp) // gone once renamed
	}
	st, err := tarcopy.Extract(ctx, root, rd, tarcopy.ExtractOptions{Top: tmp, MaxBytes: limit})
	if errors.Is(err, tarcopy.ErrTooLarge) {
		err = fmt.Errorf("%w; nothing was written (raise --max-size, 0: no limit)", err)
		if tmp == "" {
			err = fmt.Errorf("%w; the copy into %s stopped there", err, dst)
		}
	}
	if err == nil {
		err = ts.Err()
	}
	if err != nil {
		return copyResult{}, err
	}
	if tmp != "" {
		if err := root.Rename(tmp, top); err != nil {
			return copyResult{}, fmt.Errorf("putting the copy at %s: %w", dst, err)
		}
	}
	return copyResult{Entries: st.Entries, Bytes: st.Bytes, Skipped: ts.Skipped()}, nil
}

// copyIn copies the host file or tree src into sandbox id at dst (cp -r rules, decided
// inside; a dst ending in / is a directory, made when missing). The tar stream is made
// as it is sent.
func copyIn(ctx context.Context, c *sdk.Client, src, id, dst, user string) (copyResult, error) {
	name := filepath.Base(filepath.Clean(src))
	if name == "/" || name == "." || name == ".." {
		abs, err := filepath.Abs(src)
		if err != nil {
			return copyResult{}, err
		}
		if name = filepath.Base(abs); name == "/" {
			name = "root"
		}
	}
	var skipped int
	rd, stop := withProgress("cp: "+src, treeReader(ctx, func(tw *tar.Writer) error {
		return tarcopy.WriteTree(ctx, tw, src, name, func(rel, what string) { skipped++ })
	}))
	defer stop()
	tr, err := c.WriteTar(ctx, id, dst, user, strings.HasSuffix(dst, "/"), rd)
	if err != nil {
		return copyResult{}, err
	}
	return copyResult{Entries: tr.Entries, Bytes: tr.Bytes, Skipped: skipped}, nil
}

// treeReader returns a reader of the tar stream write makes, made as it is read. A
// failure of write fails the reader, so the upload ends with an error, not a short tree.
func treeReader(ctx context.Context, write func(tw *tar.Writer) error) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := write(tw)
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// tempName is a name for a copy being made beside its destination.
func tempName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return ".moat-cp-" + hex.EncodeToString(b[:])
}

// uploadSpec is one --upload DIR:PATH.
type uploadSpec struct{ src, dst string }

// parseUploads reads --upload HOST_PATH:SANDBOX_PATH flags; the host path must exist.
func parseUploads(specs []string) ([]uploadSpec, error) {
	var out []uploadSpec
	for _, s := range specs {
		src, dst, ok := strings.Cut(s, ":")
		if !ok || src == "" || dst == "" {
			return nil, fmt.Errorf("--upload %q: want HOST_PATH:SANDBOX_PATH, e.g. ./data:/home/user/data", s)
		}
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("--upload %q: %w", s, err)
		}
		out = append(out, uploadSpec{src, dst})
	}
	return out, nil
}

// upload copies each spec into sandbox id as `moat cp SRC ID:DST` does.
func upload(ctx context.Context, c *sdk.Client, id, user string, specs []uploadSpec) error {
	for _, u := range specs {
		res, err := copyIn(ctx, c, u.src, id, u.dst, user)
		if err != nil {
			return fmt.Errorf("--upload %s:%s: %w", u.src, u.dst, err)
		}
		if res.Skipped > 0 {
			fmt.Fprintf(os.Stderr, "moat: --upload %s: %d device(s), FIFO(s) or socket(s) left out\n", u.src, res.Skipped)
		}
	}
	return nil
}

// withProgress returns r counting what is read from it and, when stderr is a terminal,
// a line on stderr each second saying how much (after the first second: short copies
// print nothing); stop ends the line.
func withProgress(what string, r io.Reader) (io.Reader, func()) {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return r, func() {}
	}
	cr := &countingReader{r: r}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		printed := false
		for {
			select {
			case <-done:
				if printed {
					fmt.Fprintf(os.Stderr, "\r%s: %.1f MiB\n", termSafe(what), float64(cr.n.Load())/(1<<20))
				}
				return
			case <-t.C:
				fmt.Fprintf(os.Stderr, "\r%s: %.1f MiB", termSafe(what), float64(cr.n.Load())/(1<<20))
				printed = true
			}
		}
	}()
	return cr, func() { close(done); wg.Wait() }
}

type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
