package sandbox

import (
	"fmt"
	"slices"
)

// Telling a sandbox's users apart on the network (issue 15). The sandbox's network
// namespace S holds a source-NAT table that moat installs (internal/netns/userports.go):
// every new TCP or UDP flow leaving eth0 gets a source port from the range of its socket's
// owner (nftables `meta skuid`, which the kernel reports in S's user namespace, so the
// sandbox's own uids), root and every uid without a range from DefaultPorts. The gateway
// namespace's proxy and DNS server read the user from the client's source port (UserOf).
// A process cannot pick its identity: its own port, whatever it bound, is rewritten into
// its owner's range unless it already lies there.

// PortRange is an inclusive range of source ports.
type PortRange struct {
	Lo, Hi uint16
}

// Contains reports whether port lies in r.
func (r PortRange) Contains(port uint16) bool { return r.Lo <= port && port <= r.Hi }

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Lo, r.Hi) }

// UserPorts is the source-port range of one sandbox user.
type UserPorts struct {
	User string
	UID  uint32
	PortRange
}

// The layout of the source ports: DefaultPorts for root and every uid without a range,
// then UserSlots ranges of UserSlotSize ports. All of it lies below 32768, where the
// kernel's ephemeral ports begin (ip_local_port_range 32768-60999, which a sandbox cannot
// change: it lacks CAP_NET_ADMIN over S): a connection that reaches the gateway with a
// port in no range was not rewritten, and is refused while the sandbox has per-user rules.
const (
	UserSlotSize = 256
	UserSlots    = 112
	userPortBase = 4096
)

// DefaultPorts is the range of root and of every uid without a range of its own.
var DefaultPorts = PortRange{Lo: 1024, Hi: userPortBase - 1}

// slotPorts is the range of slot i.
func slotPorts(i uint32) PortRange {
	lo := userPortBase + i*UserSlotSize
	return PortRange{Lo: uint16(lo), Hi: uint16(lo + UserSlotSize - 1)}
}

// PortMap gives each of users a range, by its uid: slot uid % UserSlots, so a user keeps
// its range while others come and go (an open connection never changes hands). Root
// (uid 0) has none; of users whose uids share a slot the lowest uid gets it and the others
// are returned in clash (they share DefaultPorts with root: the network cannot tell them
// apart, so per-user rules are refused for them). The result is sorted by port.
func PortMap(users []User) (ports []UserPorts, clash []string) {
	sorted := slices.Clone(users)
	slices.SortFunc(sorted, func(a, b User) int { return int(int64(a.UID) - int64(b.UID)) })
	taken := map[uint32]bool{}
	for _, u := range sorted {
		slot := u.UID % UserSlots
		if u.UID == 0 || taken[slot] {
			clash = append(clash, u.Name)
			continue
		}
		taken[slot] = true
		ports = append(ports, UserPorts{User: u.Name, UID: u.UID, PortRange: slotPorts(slot)})
	}
	slices.SortFunc(ports, func(a, b UserPorts) int { return int(a.Lo) - int(b.Lo) })
	return ports, clash
}

// UserOf says whose connection has source port port: the user of the range holding it;
// "" with known for DefaultPorts (root or a uid without a range); known false for a port
// in no range (the connection was not rewritten by moat's table).
func UserOf(ports []UserPorts, port uint16) (user string, known bool) {
	if DefaultPorts.Contains(port) {
		return "", true
	}
	i, found := slices.BinarySearchFunc(ports, port, func(p UserPorts, port uint16) int {
		switch {
		case p.Hi < port:
			return -1
		case p.Lo > port:
			return 1
		}
		return 0
	})
	if !found {
		return "", false
	}
	return ports[i].User, true
}
