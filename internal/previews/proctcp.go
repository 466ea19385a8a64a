package previews

import (
	"bytes"
	"slices"
	"strconv"
)

// tcpListen is st 0A (TCP_LISTEN) of /proc/net/tcp{,6}.
const tcpListen = "0A"

// maxProcNet bounds what ListeningPorts reads of a table (a sandbox decides its size).
const maxProcNet = 4 << 20

// ListeningPorts returns the ports, ascending and once each, of the sockets in state
// LISTEN in the text of /proc/net/tcp or /proc/net/tcp6 (one or both concatenated): lines
// "sl local_address rem_address st …", local_address ADDR:PORT in hex. The header, short or
// malformed lines are skipped; only the first maxProcNet bytes are read. The table comes
// from a sandbox's network namespace: it may be crafted.
func ListeningPorts(b []byte) []int {
	if len(b) > maxProcNet {
		b = b[:maxProcNet]
	}
	seen := map[int]bool{}
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		f := bytes.Fields(line)
		if len(f) < 4 || string(f[3]) != tcpListen {
			continue
		}
		i := bytes.LastIndexByte(f[1], ':')
		if i < 0 || len(f[1])-i-1 != 4 {
			continue
		}
		p, err := strconv.ParseUint(string(f[1][i+1:]), 16, 16)
		if err != nil || p == 0 {
			continue
		}
		seen[int(p)] = true
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
