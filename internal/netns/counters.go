package netns

import (
	"context"
	"fmt"

	"github.com/moatdev/moat/internal/sandbox"
)

var _ sandbox.NetCounter = (*Manager)(nil)

// Counters returns what sandbox id sent and received over its link since its network was
// set up, read from the gateway's end (veth0 in G), which every byte in or out of the
// sandbox crosses, whatever the runtime (runsc's netstack too): veth0's received bytes are
// what the sandbox sent. ErrNotFound when the sandbox has no network.
func (m *Manager) Counters(_ context.Context, id string) (sandbox.NetCounters, error) {
	g, err := m.gateway(id)
	if err != nil {
		return sandbox.NetCounters{}, err
	}
	h, err := handleIn(g)
	if err != nil {
		return sandbox.NetCounters{}, err
	}
	defer h.Close()
	l, err := h.LinkByName(GatewayLink)
	if err != nil {
		return sandbox.NetCounters{}, fmt.Errorf("network counters of sandbox %s: %w", id, err)
	}
	st := l.Attrs().Statistics
	if st == nil {
		return sandbox.NetCounters{}, fmt.Errorf("network counters of sandbox %s: the kernel gave none", id)
	}
	return sandbox.NetCounters{RxBytes: st.TxBytes, TxBytes: st.RxBytes, RxPackets: st.TxPackets, TxPackets: st.RxPackets}, nil
}
