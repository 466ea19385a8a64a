package netns

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/sandbox"
)

// TestUserPortsReuse: a user's 256 source ports do not bound its connections: 4 × that
// many connections to one destination, each closed gracefully (its NAT tuple left in
// TIME_WAIT), all connect at the first SYN (the kernel reuses a tuple in TIME_WAIT for a
// new SYN: at most a stray retransmission in S's TCP counters, not one per SYN).
func TestUserPortsReuse(t *testing.T) {
	e := newEnv(t)
	id, sNS := e.setup(t)
	ls, err := e.m.Listen(id)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	ports, _ := sandbox.PortMap(testUsers)
	if err := e.m.SetUserPorts(sNS, ports); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ls.Proxy.Accept()
			if err != nil {
				return
			}
			go func() { b := make([]byte, 1); c.Read(b); c.Close() }()
		}
	}()
	inNS(t, sNS, func() error {
		unix.Setfsuid(int(testIDs.Host + 2001))
		defer unix.Setfsuid(0)
		for i := range 4 * sandbox.UserSlotSize {
			c, err := net.DialTimeout("tcp4", "198.18.0.1:15001", 5*time.Second)
			if err != nil {
				t.Errorf("dial %d: %v", i, err)
				return nil
			}
			c.Close()
		}
		snmp, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		// Without the reuse every SYN past the 256th would be retransmitted (768 or more);
		// a loaded host may retransmit a stray segment or two for other reasons.
		if retrans, err := strconv.Atoi(tcpCounter(string(snmp), "RetransSegs")); err != nil || retrans > 8 {
			t.Errorf("S retransmitted %d segments (%v):\n%s", retrans, err, snmp)
		}
		return nil
	})
}

// tcpCounter reads one Tcp counter of a /proc/net/snmp text.
func tcpCounter(snmp, name string) string {
	var head []string
	for _, l := range strings.Split(snmp, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		for i, h := range head {
			if h == name && i < len(f) {
				return f[i]
			}
		}
	}
	return ""
}
