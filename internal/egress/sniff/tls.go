package sniff

import "errors"

const (
	recordHeaderLen     = 5
	recordTypeHandshake = 0x16
	maxPlaintext        = 1 << 14 // RFC 8446 §5.1
	handshakeHeaderLen  = 4
	typeClientHello     = 1
	extServerName       = 0 // RFC 6066 §3
	nameTypeHostName    = 0
)

var (
	errNotHandshake    = errors.New("sniff: tls: not a handshake record")
	errRecordVersion   = errors.New("sniff: tls: record version is not 3.x")
	errEmptyRecord     = errors.New("sniff: tls: empty handshake record")
	errRecordTooLarge  = errors.New("sniff: tls: record longer than 2^14 bytes")
	errNotClientHello  = errors.New("sniff: tls: first handshake message is not a ClientHello")
	errTrailing        = errors.New("sniff: tls: data after the ClientHello")
	errMalformedHello  = errors.New("sniff: tls: malformed ClientHello")
	errMalformedExts   = errors.New("sniff: tls: malformed extensions")
	errDuplicateSNI    = errors.New("sniff: tls: more than one server_name extension")
	errMalformedSNI    = errors.New("sniff: tls: malformed server_name extension")
	errDuplicateHostSN = errors.New("sniff: tls: more than one host_name in server_name")
)

// ServerName returns the server name (SNI, RFC 6066 host_name) of the TLS ClientHello at
// the start of b, normalised as Result.Name; "" when the hello has no server_name. The
// hello may be fragmented over several handshake records. ServerName returns ErrNeedMore
// for a truncated hello, and an error for anything malformed: a record that is not a
// handshake or not version 3.x, lengths that disagree, data after the hello in its last
// record, a second server_name extension or host_name, or a name that is not a valid host
// name or IP literal.
//
// A ClientHello may carry an encrypted ClientHello (ECH) whose inner name is not visible
// here; ServerName reads only the outer name.
func ServerName(b []byte) (string, error) {
	b, full := peek(b)
	hello, err := clientHello(b)
	if err == ErrNeedMore && full {
		err = errTooLarge
	}
	if err != nil {
		return "", err
	}
	return parseHello(hello)
}

// clientHello returns the body of the ClientHello handshake message at the start of b,
// reassembled from its records. It aliases b unless the message spans records.
func clientHello(b []byte) ([]byte, error) {
	var msg []byte
	owned := false
	for off := 0; ; {
		rec := b[off:]
		if len(rec) >= 1 && rec[0] != recordTypeHandshake {
			return nil, errNotHandshake
		}
		if len(rec) >= 2 && rec[1] != 3 {
			return nil, errRecordVersion
		}
		if len(rec) < recordHeaderLen {
			return nil, ErrNeedMore
		}
		n := int(rec[3])<<8 | int(rec[4])
		switch {
		case n == 0:
			return nil, errEmptyRecord
		case n > maxPlaintext:
			return nil, errRecordTooLarge
		case off+recordHeaderLen+n > MaxPeek:
			return nil, errTooLarge
		case len(rec) < recordHeaderLen+n:
			return nil, ErrNeedMore
		}
		frag := rec[recordHeaderLen : recordHeaderLen+n]
		off += recordHeaderLen + n
		switch {
		case msg == nil:
			msg = frag
		case !owned:
			msg = append(make([]byte, 0, MaxPeek), msg...)
			owned = true
			fallthrough
		default:
			msg = append(msg, frag...)
		}
		if len(msg) < handshakeHeaderLen {
			continue
		}
		if msg[0] != typeClientHello {
			return nil, errNotClientHello
		}
		l := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		switch end := handshakeHeaderLen + l; {
		case end > MaxPeek-recordHeaderLen:
			return nil, errTooLarge
		case len(msg) > end:
			return nil, errTrailing
		case len(msg) == end:
			return msg[handshakeHeaderLen:], nil
		}
	}
}

// parseHello reads the server name from a ClientHello body (RFC 8446 §4.1.2, which also
// covers TLS 1.0–1.2 hellos).
func parseHello(m []byte) (string, error) {
	r := reader(m)
	if !r.skip(2 + 32) { // legacy_version, random
		return "", errMalformedHello
	}
	if sid, ok := r.vec8(); !ok || len(sid) > 32 {
		return "", errMalformedHello
	}
	if cs, ok := r.vec16(); !ok || len(cs) < 2 || len(cs)%2 != 0 {
		return "", errMalformedHello
	}
	if cm, ok := r.vec8(); !ok || len(cm) < 1 {
		return "", errMalformedHello
	}
	if len(r) == 0 { // no extensions (TLS 1.2 and older)
		return "", nil
	}
	exts, ok := r.vec16()
	if !ok || len(r) != 0 {
		return "", errMalformedExts
	}
	var name []byte
	seen := false
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec16()
		if !ok1 || !ok2 {
			return "", errMalformedExts
		}
		if typ != extServerName {
			continue
		}
		if seen {
			return "", errDuplicateSNI
		}
		seen = true
		var err error
		if name, err = parseSNI(data); err != nil {
			return "", err
		}
	}
	if name == nil {
		return "", nil
	}
	return hostName(name)
}

// parseSNI returns the host_name of a server_name extension, nil if it has none.
func parseSNI(data reader) ([]byte, error) {
	list, ok := data.vec16()
	if !ok || len(data) != 0 || len(list) == 0 {
		return nil, errMalformedSNI
	}
	var host []byte
	for len(list) > 0 {
		typ, ok1 := list.u8()
		name, ok2 := list.vec16()
		if !ok1 || !ok2 || len(name) == 0 {
			return nil, errMalformedSNI
		}
		if typ != nameTypeHostName {
			continue
		}
		if host != nil {
			return nil, errDuplicateHostSN
		}
		host = name
	}
	return host, nil
}

// reader consumes big-endian TLS fields from the front of a byte slice.
type reader []byte

func (r *reader) skip(n int) bool {
	if len(*r) < n {
		return false
	}
	*r = (*r)[n:]
	return true
}

func (r *reader) u8() (int, bool) {
	if len(*r) < 1 {
		return 0, false
	}
	v := int((*r)[0])
	*r = (*r)[1:]
	return v, true
}

func (r *reader) u16() (int, bool) {
	if len(*r) < 2 {
		return 0, false
	}
	v := int((*r)[0])<<8 | int((*r)[1])
	*r = (*r)[2:]
	return v, true
}

func (r *reader) bytes(n int) (reader, bool) {
	if len(*r) < n {
		return nil, false
	}
	v := (*r)[:n]
	*r = (*r)[n:]
	return v, true
}

func (r *reader) vec8() (reader, bool) {
	n, ok := r.u8()
	if !ok {
		return nil, false
	}
	return r.bytes(n)
}

func (r *reader) vec16() (reader, bool) {
	n, ok := r.u16()
	if !ok {
		return nil, false
	}
	return r.bytes(n)
}
