package gitgate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// ObjectFormat is a repository's hash algorithm, as the object-format capability names it.
type ObjectFormat string

// The object formats git knows.
const (
	SHA1   ObjectFormat = "sha1"
	SHA256 ObjectFormat = "sha256"
)

// HexLen is the length of an object id of format f in hex: 40 or 64; 0 for an unknown
// format.
func (f ObjectFormat) HexLen() int {
	switch f {
	case SHA1:
		return 40
	case SHA256:
		return 64
	}
	return 0
}

// ZeroID is the all-zero object id of format f: the old id of a creation and the new id of
// a deletion.
func (f ObjectFormat) ZeroID() string { return strings.Repeat("0", f.HexLen()) }

// Command is one ref update of a push: set Ref from Old to New. Old is the zero id for a
// creation, New for a deletion. Ids are lowercase hex of the request's object format.
type Command struct {
	Old, New string
	Ref      string
}

// IsCreate reports whether c creates its ref.
func (c Command) IsCreate() bool { return isZeroID(c.Old) }

// IsDelete reports whether c deletes its ref.
func (c Command) IsDelete() bool { return isZeroID(c.New) }

func isZeroID(id string) bool { return id != "" && strings.Trim(id, "0") == "" }

// Capabilities are the capabilities a client asked for, in its order, e.g. "report-status",
// "side-band-64k", "object-format=sha256", "agent=git/2.43.0".
type Capabilities []string

// Has reports whether name was asked for, bare or with a value ("agent" matches
// "agent=git/2.43.0").
func (c Capabilities) Has(name string) bool {
	_, ok := c.Value(name)
	return ok
}

// Value returns the value of capability name ("" if it has none) and whether it is there.
func (c Capabilities) Value(name string) (string, bool) {
	for _, s := range c {
		if s == name {
			return "", true
		}
		if v, ok := strings.CutPrefix(s, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// Request is a parsed git-receive-pack request: what a push asks the server to do.
type Request struct {
	// Format is the object format of every id in the request (SHA1 unless the client sent
	// object-format=sha256).
	Format ObjectFormat
	// Capabilities are those on the first command line (or the push-cert line).
	Capabilities Capabilities
	// Commands are the ref updates, in order; at least one, each ref at most once.
	Commands []Command
	// Shallow are the client's shallow boundary commits, sent by a shallow clone on every
	// push. They grant nothing by themselves; see the package notes in docs/internals.md.
	Shallow []string
	// PushCert is true when the commands came inside a push certificate (git push
	// --signed). Policy.Decide refuses such a push.
	PushCert bool
	// Options are the push options (git push -o), sent when the client asked for the
	// push-options capability. Policy.Decide refuses a push with any.
	Options []string
	// Pack reads the packfile, from its "PACK" signature on, to the end of the body; nil
	// when the body ends after the commands (a push of deletions only). It must be used
	// instead of the reader given to ParseReceivePack, which has been read ahead of it.
	Pack io.Reader
}

// Limits bound what ParseReceivePack accepts; a zero field takes its default.
type Limits struct {
	MaxCommands int // default 256
	MaxShallow  int // default 4096
	MaxOptions  int // default 64
	// MaxCertBytes bounds the payload of a push certificate, all lines together (default
	// 64 KiB).
	MaxCertBytes int
}

func (l Limits) withDefaults() Limits {
	if l.MaxCommands <= 0 {
		l.MaxCommands = 256
	}
	if l.MaxShallow <= 0 {
		l.MaxShallow = 4096
	}
	if l.MaxOptions <= 0 {
		l.MaxOptions = 64
	}
	if l.MaxCertBytes <= 0 {
		l.MaxCertBytes = 64 << 10
	}
	return l
}

// ParseReceivePack reads a git-receive-pack request (the body of POST .../git-receive-pack,
// after the caller undid any Content-Encoding) up to the start of its packfile:
//
//	*("shallow" SP id) (command-list | push-cert) flush [*push-option flush] [packfile]
//
// It checks everything it reads: pkt-line framing, lowercase ids of one object format,
// ref names ([CheckRefName]), capability syntax, and the bounds in lim; a request with no
// command, a ref named twice, or bytes after the commands that are not a packfile is
// refused. Every such error wraps errdefs.ErrInvalidArgument; a body cut short is
// io.ErrUnexpectedEOF. Memory is bounded by lim, never by what the input claims.
func ParseReceivePack(r io.Reader, lim Limits) (*Request, error) {
	lim = lim.withDefaults()
	br := bufio.NewReaderSize(r, 4096)
	p := &parser{pr: NewPktReader(br), lim: lim}
	req, err := p.parse()
	if err != nil {
		return nil, fmt.Errorf("receive-pack request: %w", err)
	}
	sig, err := br.Peek(4)
	switch {
	case len(sig) == 0 && errors.Is(err, io.EOF):
		// No pack: git sends none when every command is a deletion. Whether a
		// creation or update without one can stand is the host's business (it has the
		// objects or refuses).
	case string(sig) == "PACK":
		req.Pack = br
	case err != nil && !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("receive-pack request: reading pack: %w", err)
	default:
		return nil, fmt.Errorf("receive-pack request: %q after the commands is not a packfile: %w", sig, errdefs.ErrInvalidArgument)
	}
	return req, nil
}

type parser struct {
	pr  *PktReader
	lim Limits
	req Request
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// next reads a data line with its one trailing LF removed, or reports a flush with
// flush=true. Delim and response-end are not part of this protocol (v0).
func (p *parser) next() (line []byte, flush bool, err error) {
	kind, data, err := p.pr.Read()
	if errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("body ends before the flush after the commands: %w", io.ErrUnexpectedEOF)
	}
	if err != nil {
		return nil, false, err
	}
	switch kind {
	case PktFlush:
		return nil, true, nil
	case PktData:
		return bytes.TrimSuffix(data, []byte("\n")), false, nil
	}
	return nil, false, invalid("unexpected %s packet", kind)
}

func (p *parser) parse() (*Request, error) {
	var shallow []string
	line, flush, err := p.next()
	for ; err == nil && !flush; line, flush, err = p.next() {
		oid, ok := bytes.CutPrefix(line, []byte("shallow "))
		if !ok {
			break
		}
		if len(shallow) >= p.lim.MaxShallow {
			return nil, invalid("more than %d shallow lines", p.lim.MaxShallow)
		}
		shallow = append(shallow, string(oid)) // checked once the format is known
	}
	if err != nil {
		return nil, err
	}
	if flush {
		return nil, invalid("no commands")
	}

	if rest, ok := bytes.CutPrefix(line, []byte("push-cert\x00")); ok {
		if err := p.capabilities(rest); err != nil {
			return nil, err
		}
		if err := p.pushCert(); err != nil {
			return nil, err
		}
		if _, flush, err := p.next(); err != nil {
			return nil, err
		} else if !flush {
			return nil, invalid("data after the push certificate")
		}
	} else {
		cmd, caps, hasCaps := bytes.Cut(line, []byte{0})
		if !hasCaps {
			return nil, invalid("first command has no capability list")
		}
		if err := p.capabilities(caps); err != nil {
			return nil, err
		}
		for ; err == nil && !flush; line, flush, err = p.next() {
			if cmd == nil {
				cmd = line
				if bytes.IndexByte(cmd, 0) >= 0 {
					return nil, invalid("NUL in a command after the first")
				}
			}
			if err := p.command(cmd); err != nil {
				return nil, err
			}
			cmd = nil
		}
		if err != nil {
			return nil, err
		}
	}

	for _, oid := range shallow {
		if err := p.checkID(oid); err != nil {
			return nil, fmt.Errorf("shallow line: %w", err)
		}
	}
	p.req.Shallow = shallow

	if p.req.Capabilities.Has("push-options") {
		for {
			line, flush, err := p.next()
			if err != nil {
				return nil, fmt.Errorf("push options: %w", err)
			}
			if flush {
				break
			}
			if len(p.req.Options) >= p.lim.MaxOptions {
				return nil, invalid("more than %d push options", p.lim.MaxOptions)
			}
			p.req.Options = append(p.req.Options, string(line))
		}
	}
	return &p.req, nil
}

func (p *parser) capabilities(b []byte) error {
	p.req.Format = SHA1
	formats := 0
	for c := range bytes.FieldsSeq(b) {
		for _, ch := range c {
			if ch <= ' ' || ch >= 0x7f {
				return invalid("capability %q has a byte outside printable ASCII", truncate(string(c), 80))
			}
		}
		if len(p.req.Capabilities) >= 64 {
			return invalid("more than 64 capabilities")
		}
		s := string(c)
		p.req.Capabilities = append(p.req.Capabilities, s)
		if f, ok := strings.CutPrefix(s, "object-format="); ok {
			formats++
			p.req.Format = ObjectFormat(f)
			if p.req.Format.HexLen() == 0 || formats > 1 {
				return invalid("object-format capability %q: want one of sha1, sha256", truncate(s, 80))
			}
		}
	}
	return nil
}

func (p *parser) checkID(id string) error {
	if len(id) != p.req.Format.HexLen() {
		return invalid("object id %q is not %d hex digits (%s)", truncate(id, 80), p.req.Format.HexLen(), p.req.Format)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return invalid("object id %q is not lowercase hex", id)
		}
	}
	return nil
}

// command parses "old SP new SP ref" into the request.
func (p *parser) command(b []byte) error {
	if len(p.req.Commands) >= p.lim.MaxCommands {
		return invalid("more than %d commands", p.lim.MaxCommands)
	}
	c, err := p.parseCommand(b)
	if err != nil {
		return err
	}
	for _, prev := range p.req.Commands {
		if prev.Ref == c.Ref {
			return invalid("ref %q updated twice", c.Ref)
		}
	}
	p.req.Commands = append(p.req.Commands, c)
	return nil
}

func (p *parser) parseCommand(b []byte) (Command, error) {
	n := p.req.Format.HexLen()
	if len(b) < 2*n+3 || b[n] != ' ' || b[2*n+1] != ' ' {
		return Command{}, invalid("command %q is not %q", truncate(string(b), 200), "<old-id> <new-id> <ref>")
	}
	c := Command{Old: string(b[:n]), New: string(b[n+1 : 2*n+1]), Ref: string(b[2*n+2:])}
	if err := p.checkID(c.Old); err != nil {
		return Command{}, fmt.Errorf("command for %q: %w", truncate(c.Ref, 80), err)
	}
	if err := p.checkID(c.New); err != nil {
		return Command{}, fmt.Errorf("command for %q: %w", truncate(c.Ref, 80), err)
	}
	if err := CheckRefName(c.Ref); err != nil {
		return Command{}, err
	}
	if c.IsCreate() && c.IsDelete() {
		return Command{}, invalid("command for %q has zero old and new ids", c.Ref)
	}
	return c, nil
}

// pushCert reads a push certificate after its first line, up to "push-cert-end", and takes
// its commands. The signature is not checked: Policy.Decide refuses the push anyway.
//
//	certificate version 0.1, pusher, pushee, nonce, push-option lines; an empty line;
//	commands; signature lines; push-cert-end
func (p *parser) pushCert() error {
	p.req.PushCert = true
	total := 0
	inHeader, inSig := true, false
	for {
		line, flush, err := p.next()
		if err != nil {
			return fmt.Errorf("push certificate: %w", err)
		}
		if flush {
			return invalid("push certificate ends without push-cert-end")
		}
		if total += len(line) + 1; total > p.lim.MaxCertBytes {
			return invalid("push certificate longer than %d bytes", p.lim.MaxCertBytes)
		}
		switch {
		case string(line) == "push-cert-end":
			if inHeader {
				return invalid("push certificate has no empty line before its commands")
			}
			if len(p.req.Commands) == 0 {
				return invalid("no commands")
			}
			return nil
		case inHeader:
			inHeader = len(line) != 0
		case !inSig && bytes.HasPrefix(line, []byte("-----BEGIN ")):
			inSig = true
		case !inSig:
			if err := p.command(line); err != nil {
				return fmt.Errorf("push certificate: %w", err)
			}
		}
	}
}
