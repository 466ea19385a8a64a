package netns

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/linux"
)

// The egress listeners in G. The daemon creates them (Listen, ListenPacket) and serves
// them; the firewall sends every sandbox connection to them.
const (
	// ProxyPort receives every TCP connection the sandbox opens, whatever its destination.
	ProxyPort = 15001
	// DNSPort receives every DNS query (UDP and TCP port 53) the sandbox sends.
	DNSPort = 15053
	// firewallTable is the nftables table of G holding the rules below.
	firewallTable = "moat"
)

// installFirewall writes G's ruleset through the netlink socket of the namespace g, in one
// transaction:
//
//	table inet moat {
//	  chain prerouting { type nat hook prerouting priority dstnat;
//	    iifname "veth0" meta nfproto ipv4 udp dport 53 redirect to :15053
//	    iifname "veth0" meta nfproto ipv4 tcp dport 53 redirect to :15053
//	    iifname "veth0" meta nfproto ipv4 meta l4proto tcp redirect to :15001 }
//	  chain input { type filter hook input priority filter; policy drop;
//	    iifname "lo" accept
//	    ct state established,related accept
//	    iifname "veth0" meta nfproto ipv4 tcp dport { 15001, 15053 } accept
//	    iifname "veth0" meta nfproto ipv4 udp dport 15053 accept }
//	  chain forward { type filter hook forward priority filter; policy drop; }
//	}
//
// Everything else the sandbox sends (other UDP, ICMP, IPv6, anything not TCP) is dropped
// at input, and forwarding is refused twice (ip_forward=0 and the forward chain). The
// replies to the daemon's own connections into the sandbox are "established". The rules
// live in G, which no sandbox process can enter.
func installFirewall(g *os.File) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(g.Fd())))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: firewallTable})
	drop := nftables.ChainPolicyDrop
	pre := c.AddChain(&nftables.Chain{
		Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest,
	})
	in := c.AddChain(&nftables.Chain{
		Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	})
	c.AddChain(&nftables.Chain{
		Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	})

	rule := func(ch *nftables.Chain, exprs ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(exprs...)})
	}
	fromSandbox := concat(ifname(unix.NFT_META_IIFNAME, GatewayLink), ipv4())
	rule(pre, fromSandbox, l4(unix.IPPROTO_UDP), dport(53), redirect(DNSPort))
	rule(pre, fromSandbox, l4(unix.IPPROTO_TCP), dport(53), redirect(DNSPort))
	rule(pre, fromSandbox, l4(unix.IPPROTO_TCP), redirect(ProxyPort))

	rule(in, ifname(unix.NFT_META_IIFNAME, "lo"), accept())
	rule(in, ctEstablished(), accept())
	rule(in, fromSandbox, l4(unix.IPPROTO_TCP), dport(ProxyPort), accept())
	rule(in, fromSandbox, l4(unix.IPPROTO_TCP), dport(DNSPort), accept())
	rule(in, fromSandbox, l4(unix.IPPROTO_UDP), dport(DNSPort), accept())
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing the gateway firewall: %w", err)
	}
	return nil
}

// checkFirewall reports whether G's firewall table is in place.
func checkFirewall(g *os.File) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(g.Fd())))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("listing nftables chains: %w", err)
	}
	found := map[string]bool{}
	for _, ch := range chains {
		if ch.Table.Name == firewallTable {
			found[ch.Name] = true
		}
	}
	for _, want := range []string{"prerouting", "input", "forward"} {
		if !found[want] {
			return fmt.Errorf("firewall chain %s missing", want)
		}
	}
	return nil
}

func concat(parts ...[]expr.Any) []expr.Any {
	var all []expr.Any
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

// ifname matches the input (or output) interface name.
func ifname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

func ipv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

func l4(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

// dport matches the transport header's destination port (TCP and UDP keep it at offset 2).
func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(p)},
	}
}

func redirect(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: be16(p)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

func ctEstablished() []expr.Any {
	mask := make([]byte, 4)
	binary.NativeEndian.PutUint32(mask, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

func accept() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }

func be16(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }

// ProbeFirewall installs the gateway firewall in a throwaway network namespace and reads
// it back: it reports whether this kernel can enforce the egress boundary (nf_tables with
// NAT, redirect and conntrack). `moat doctor` runs it.
func ProbeFirewall(tmpDir string) error {
	path := filepath.Join(tmpDir, fmt.Sprintf("moat-firewall-probe-%d", os.Getpid()))
	err := linux.CreateNetNS(path, func() error {
		g, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return err
		}
		defer g.Close()
		if err := installFirewall(g); err != nil {
			return err
		}
		return checkFirewall(g)
	})
	if err == nil {
		err = linux.UnmountFile(path)
	}
	return err
}
