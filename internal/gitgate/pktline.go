package gitgate

import (
	"errors"
	"fmt"
	"io"

	"github.com/moatdev/moat/internal/errdefs"
)

// Pkt-line limits (gitprotocol-common): a line's length counts its 4-byte header.
const (
	// MaxPktLen is the largest pkt-line, header included (git's LARGE_PACKET_MAX).
	MaxPktLen = 65520
	// MaxPktData is the largest payload of one pkt-line.
	MaxPktData = MaxPktLen - 4
)

// PktKind is the kind of a pkt-line.
type PktKind uint8

// The kinds of pkt-line. Data lines carry a payload (possibly empty, "0004"); the special
// lines carry none.
const (
	PktData        PktKind = iota
	PktFlush               // 0000
	PktDelim               // 0001 (protocol v2)
	PktResponseEnd         // 0002 (protocol v2)
)

func (k PktKind) String() string {
	switch k {
	case PktData:
		return "data"
	case PktFlush:
		return "flush"
	case PktDelim:
		return "delim"
	case PktResponseEnd:
		return "response-end"
	}
	return fmt.Sprintf("PktKind(%d)", uint8(k))
}

// PktReader reads pkt-lines from an io.Reader. It reads exactly the bytes of the lines it
// returns and nothing more, so the underlying reader is positioned just after the last line
// read (where a packfile starts, say). It holds one line at a time in a fixed 65520-byte
// buffer whatever the input claims.
type PktReader struct {
	r   io.Reader
	hdr [4]byte
	buf [MaxPktData]byte
	off int64 // bytes consumed, for error messages
}

// NewPktReader returns a reader of the pkt-lines of r.
func NewPktReader(r io.Reader) *PktReader { return &PktReader{r: r} }

// Read reads the next pkt-line. For PktData, data is its payload, valid until the next call
// to Read; for the special lines data is nil. At a clean end of input (no byte of a next
// line) it returns io.EOF; a truncated line is io.ErrUnexpectedEOF. A malformed header (not
// 4 hex digits, or a length of 3 or less other than 0000-0002, or 0003) or a length over
// MaxPktLen is an errdefs.ErrInvalidArgument error.
func (p *PktReader) Read() (kind PktKind, data []byte, err error) {
	at := p.off
	n, err := io.ReadFull(p.r, p.hdr[:])
	p.off += int64(n)
	if err != nil {
		if n > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("pkt-line at byte %d: truncated header: %w", at, err)
		}
		return 0, nil, err
	}
	length, ok := parseHex4(p.hdr)
	if !ok {
		return 0, nil, fmt.Errorf("pkt-line at byte %d: length %q is not 4 hex digits: %w", at, p.hdr[:], errdefs.ErrInvalidArgument)
	}
	switch {
	case length == 0:
		return PktFlush, nil, nil
	case length == 1:
		return PktDelim, nil, nil
	case length == 2:
		return PktResponseEnd, nil, nil
	case length < 4:
		return 0, nil, fmt.Errorf("pkt-line at byte %d: invalid length %d: %w", at, length, errdefs.ErrInvalidArgument)
	case length > MaxPktLen:
		return 0, nil, fmt.Errorf("pkt-line at byte %d: length %d is over the maximum %d: %w", at, length, MaxPktLen, errdefs.ErrInvalidArgument)
	}
	data = p.buf[:length-4]
	n, err = io.ReadFull(p.r, data)
	p.off += int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("pkt-line at byte %d: truncated payload (%d of %d bytes): %w", at, n, length-4, err)
	}
	return PktData, data, nil
}

// Offset is the number of bytes consumed so far.
func (p *PktReader) Offset() int64 { return p.off }

func parseHex4(h [4]byte) (int, bool) {
	v := 0
	for _, c := range h {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | int(d)
	}
	return v, true
}

// PktWriter writes pkt-lines to an io.Writer. It does not buffer; wrap the writer in a
// bufio.Writer for many small lines.
type PktWriter struct {
	w io.Writer
}

// NewPktWriter returns a writer of pkt-lines to w.
func NewPktWriter(w io.Writer) *PktWriter { return &PktWriter{w: w} }

const hexDigits = "0123456789abcdef"

// Write writes one data pkt-line with payload data, which must be at most MaxPktData bytes
// (errdefs.ErrInvalidArgument otherwise; nothing is written). An empty payload is written as
// "0004", which git accepts but does not send itself.
func (p *PktWriter) Write(data []byte) error {
	if len(data) > MaxPktData {
		return fmt.Errorf("pkt-line payload of %d bytes is over the maximum %d: %w", len(data), MaxPktData, errdefs.ErrInvalidArgument)
	}
	var hdr [4]byte
	putHex4(&hdr, len(data)+4)
	line := make([]byte, 0, 4+len(data))
	line = append(append(line, hdr[:]...), data...)
	_, err := p.w.Write(line)
	return err
}

// WriteString writes one data pkt-line with payload s; see Write.
func (p *PktWriter) WriteString(s string) error { return p.Write([]byte(s)) }

// Flush writes a flush-pkt (0000).
func (p *PktWriter) Flush() error { return p.special(0) }

// Delim writes a delim-pkt (0001).
func (p *PktWriter) Delim() error { return p.special(1) }

// ResponseEnd writes a response-end-pkt (0002).
func (p *PktWriter) ResponseEnd() error { return p.special(2) }

func (p *PktWriter) special(n int) error {
	var hdr [4]byte
	putHex4(&hdr, n)
	_, err := p.w.Write(hdr[:])
	return err
}

func putHex4(h *[4]byte, n int) {
	h[0] = hexDigits[n>>12&0xf]
	h[1] = hexDigits[n>>8&0xf]
	h[2] = hexDigits[n>>4&0xf]
	h[3] = hexDigits[n&0xf]
}
