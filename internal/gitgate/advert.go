package gitgate

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/moatdev/moat/internal/errdefs"
)

// Refused capabilities: what FilterAdvertisement removes from a receive-pack
// advertisement because Policy.Decide would refuse a push that uses it. Without them, git
// refuses --signed and -o itself, before sending anything, with its own clear message ("the
// receiving end does not support ...").
func refusedCapabilities() []string {
	return []string{"push-cert", "push-options"}
}

// FilterAdvertisement copies a receive-pack advertisement (the body of GET
// .../info/refs?service=git-receive-pack from the git host) from src to dst, removing the
// capabilities moat refuses (push-cert, push-options) from the first ref line. Everything
// else is copied as it is, one pkt-line at a time (memory stays one line): the smart-HTTP
// "# service=git-receive-pack" header and its flush, an optional "version 1" line, the
// refs, the final flush. It stops after the final flush. An advertisement that is not of
// that form (protocol v2, a missing header or flush, a first ref line without
// capabilities) is errdefs.ErrInvalidArgument; what was copied before the error must be
// discarded by the caller (it should answer 502 rather than forward a partial body).
func FilterAdvertisement(dst io.Writer, src io.Reader) error {
	pr, pw := NewPktReader(src), NewPktWriter(dst)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("receive-pack advertisement: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	read := func() (PktKind, []byte, error) {
		k, d, err := pr.Read()
		if errors.Is(err, io.EOF) {
			return 0, nil, fmt.Errorf("receive-pack advertisement: ends early: %w", io.ErrUnexpectedEOF)
		}
		if err == nil && k != PktData && k != PktFlush {
			err = bad("unexpected %s packet", k)
		}
		return k, d, err
	}
	k, d, err := read()
	if err != nil {
		return err
	}
	if k != PktData || string(bytes.TrimSuffix(d, []byte("\n"))) != "# service=git-receive-pack" {
		return bad("no %q header", "# service=git-receive-pack")
	}
	if err := pw.Write(d); err != nil {
		return err
	}
	if k, _, err := read(); err != nil {
		return err
	} else if k != PktFlush {
		return bad("no flush after the header")
	}
	if err := pw.Flush(); err != nil {
		return err
	}
	for first := true; ; {
		k, d, err := read()
		if err != nil {
			return err
		}
		if k == PktFlush {
			return pw.Flush()
		}
		line := d
		if first && bytes.HasPrefix(d, []byte("version ")) {
			if string(bytes.TrimSuffix(d, []byte("\n"))) != "version 1" {
				return bad("protocol %q", truncate(string(d), 40))
			}
		} else if first {
			first = false
			refs, caps, ok := bytes.Cut(d, []byte{0})
			if !ok {
				return bad("first ref line has no capabilities")
			}
			line = append(append(append([]byte(nil), refs...), 0), filterCaps(caps)...)
		}
		if err := pw.Write(line); err != nil {
			return err
		}
	}
}

// filterCaps removes refusedCapabilities from a space-separated list, keeping a trailing
// LF.
func filterCaps(caps []byte) []byte {
	body, lf := bytes.CutSuffix(caps, []byte("\n"))
	var out [][]byte
	for c := range bytes.FieldsSeq(body) {
		name, _, _ := bytes.Cut(c, []byte("="))
		keep := true
		for _, r := range refusedCapabilities() {
			if string(name) == r {
				keep = false
			}
		}
		if keep {
			out = append(out, c)
		}
	}
	res := bytes.Join(out, []byte(" "))
	if lf {
		res = append(res, '\n')
	}
	return res
}
