package bench

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/tarcopy"
	"github.com/moatdev/moat/sdk"
)

// FilesResult is the `moat cp` figure: one file of MiB mebibytes copied into and out of a
// runc sandbox the way the CLI copies (a tar stream through the daemon, made and taken
// apart by moat-init inside), beside the same bytes moved by the raw runtime's exec (`cat`
// through runc exec's stdin and stdout) in the same run. Each run does all four, in turn.
type FilesResult struct {
	MiB     int     `json:"mib"`
	In      Latency `json:"cp_in"`
	Out     Latency `json:"cp_out"`
	RawIn   Latency `json:"raw_exec_in"`
	RawOut  Latency `json:"raw_exec_out"`
	OutToIn float64 `json:"out_to_in_ratio_p50"` // cp out p50 / cp in p50
	InRaw   float64 `json:"in_to_raw_ratio_p50"`
	OutRaw  float64 `json:"out_to_raw_ratio_p50"`
}

// Files measures the cp figure with runs runs of a file of mib MiB.
func Files(ctx context.Context, c *sdk.Client, o Options, runs, mib int) (*FilesResult, error) {
	req := smallSandbox
	req.Runtime = "runc"
	req.DiskBytes = int64(4*mib+256) << 20
	// Unthrottled drive: the figure is the copy path's, not the default I/O throttle's.
	req.IOBps, req.IOIops = 1<<40, 1<<30
	sb, err := c.Create(ctx, req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), sb.ID) }()
	work, err := os.MkdirTemp("", "moat-bench-files-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	src := filepath.Join(work, "big")
	if err := writeRandom(src, int64(mib)<<20); err != nil {
		return nil, err
	}
	bin, global, err := o.RuntimeArgs("runc")
	if err != nil {
		return nil, err
	}
	// rawExec runs argv in the sandbox as its user through the runtime itself, as the
	// baseline: bytes through runc exec's stdin and stdout, no daemon, no moat-init.
	rawExec := func(stdin io.Reader, stdout io.Writer, argv ...string) error {
		cmd := exec.CommandContext(ctx, bin, append(append(append([]string{}, global...), "exec", "--user", "1000:1000", sb.ID), argv...)...)
		var stderr strings.Builder
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("runc exec: %v: %s", err, stderr.String())
		}
		return nil
	}
	var in, out, rawIn, rawOut []time.Duration
	for i := range runs {
		dst := filepath.Join(work, fmt.Sprintf("out%d", i))
		steps := []struct {
			into *[]time.Duration
			run  func() error
		}{
			{&in, func() error {
				_, err := c.WriteTar(ctx, sb.ID, "/home/user/", "", true, treeOf(ctx, src, "big"))
				return err
			}},
			{&out, func() error { return extractTo(ctx, c, sb.ID, "/home/user/big", dst) }},
			{&rawIn, func() error {
				f, err := os.Open(src)
				if err != nil {
					return err
				}
				defer f.Close()
				return rawExec(f, nil, "/bin/sh", "-c", "cat > /home/user/raw")
			}},
			{&rawOut, func() error {
				f, err := os.Create(dst + ".raw")
				if err != nil {
					return err
				}
				defer f.Close()
				return rawExec(nil, f, "/bin/cat", "/home/user/raw")
			}},
		}
		for _, s := range steps {
			t0 := time.Now()
			if err := s.run(); err != nil {
				return nil, err
			}
			*s.into = append(*s.into, time.Since(t0))
		}
		for _, p := range []string{dst, dst + ".raw"} {
			if fi, err := os.Stat(p); err != nil || fi.Size() != int64(mib)<<20 {
				return nil, fmt.Errorf("copied out %s: %v, %v", p, fi, err)
			}
			os.Remove(p)
		}
	}
	r := &FilesResult{MiB: mib, In: summarize(in), Out: summarize(out), RawIn: summarize(rawIn), RawOut: summarize(rawOut)}
	r.OutToIn = r.Out.P50 / r.In.P50
	r.InRaw = r.In.P50 / r.RawIn.P50
	r.OutRaw = r.Out.P50 / r.RawOut.P50
	return r, nil
}

func writeRandom(path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, n); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// treeOf is the tar stream of path as the CLI sends it, made as it is read.
func treeOf(ctx context.Context, path, name string) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tarcopy.WriteTree(ctx, tw, path, name, nil)
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// extractTo copies path of sandbox id to dst as `moat cp ID:PATH DST` does.
func extractTo(ctx context.Context, c *sdk.Client, id, path, dst string) error {
	root, err := os.OpenRoot(filepath.Dir(dst))
	if err != nil {
		return err
	}
	defer root.Close()
	ts, err := c.ReadTar(ctx, id, path, "")
	if err != nil {
		return err
	}
	defer ts.Close()
	if _, err := tarcopy.Extract(ctx, root, ts, tarcopy.ExtractOptions{Top: filepath.Base(dst)}); err != nil {
		return err
	}
	return ts.Err()
}
