package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
)

// userPortsTable is the nftables table moat keeps in a sandbox's own namespace S.
const userPortsTable = "moat-users"

// SetUserPorts writes the source-NAT table that tags a sandbox's connections with their
// user (sandbox.PortMap) into the network namespace pinned at sandboxNS, replacing the
// one there, in one netlink transaction:
//
//	table ip moat-users {
//	  chain postrouting { type nat hook postrouting priority srcnat;
//	    oifname "eth0" meta l4proto tcp meta skuid UID snat to 198.18.0.2:LO-HI   (per user, tcp and udp)
//	    oifname "eth0" meta l4proto tcp snat to 198.18.0.2:1024-4095                (everyone else)
//	    oifname "eth0" meta l4proto udp snat to 198.18.0.2:1024-4095 }
//	}
//
// The rule is read on each new flow's first packet (the NAT binding lives in its conntrack
// entry), so the owner of the socket that opened the flow names it. `meta skuid` is the
// socket file's fsuid as seen from S's user namespace U: the sandbox's own uids. The table
// is written from the daemon, which holds CAP_NET_ADMIN over S through the initial user
// namespace; no process of the sandbox does (it is not in the sandbox's capability set,
// and a user namespace the sandbox makes owns none of S), so none can change it.
//
// Who may call: the sandbox manager, before the container starts and after a change of
// the users; the namespace must be a sandbox's S (the caller owns it).
func (m *Manager) SetUserPorts(sandboxNS string, ports []sandbox.UserPorts) error {
	s, err := linux.OpenNetNS(sandboxNS)
	if err != nil {
		return fmt.Errorf("opening the sandbox's network namespace: %w", err)
	}
	defer s.Close()
	if host, err := isHostNetNS(s); err != nil {
		return err
	} else if host {
		return fmt.Errorf("%s is the host's network namespace", sandboxNS)
	}
	if err := installUserPorts(s, ports); err != nil {
		return err
	}
	return checkUserPorts(s, len(ports))
}

// installUserPorts writes the table through the netlink socket of namespace s.
func installUserPorts(s *os.File, ports []sandbox.UserPorts) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(s.Fd())))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: userPortsTable})
	// The table exists or is made above; its rules are replaced in the same transaction,
	// so no flow is ever decided without them.
	c.FlushTable(t)
	post := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	out := ifname(unix.NFT_META_OIFNAME, SandboxLink)
	for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
		for _, p := range ports {
			c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: concat(out, l4(proto), skuid(p.UID), snatPorts(p.PortRange))})
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: concat(out, l4(proto), snatPorts(sandbox.DefaultPorts))})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing the sandbox's per-user source ports: %w", err)
	}
	return nil
}

// checkUserPorts reads the table back: one rule per user and protocol, and the defaults.
func checkUserPorts(s *os.File, users int) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(s.Fd())))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: userPortsTable}
	rules, err := c.GetRules(t, &nftables.Chain{Name: "postrouting", Table: t})
	if err != nil {
		return fmt.Errorf("reading the sandbox's per-user source ports back: %w", err)
	}
	if want := 2 * (users + 1); len(rules) != want {
		return fmt.Errorf("the sandbox's per-user source-port table has %d rules, want %d: %w", len(rules), want, errors.ErrUnsupported)
	}
	return nil
}

// skuid matches the uid owning the packet's socket.
func skuid(uid uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, uid)},
	}
}

// snatPorts rewrites the source to the sandbox's own address and a port of r (kept when
// it already lies in r and the flow stays unique).
func snatPorts(r sandbox.PortRange) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: SandboxAddr.AsSlice()},
		&expr.Immediate{Register: 2, Data: be16(r.Lo)},
		&expr.Immediate{Register: 3, Data: be16(r.Hi)},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 2, RegProtoMax: 3, Specified: true},
	}
}
