package dns

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

func FuzzAnswer(f *testing.F) {
	for _, q := range []*dns.Msg{
		question("allowed.example.", dns.TypeA),
		question("denied.example.", dns.TypeTXT),
		question("4.3.19.198.in-addr.arpa.", dns.TypePTR),
	} {
		b, err := q.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	h := newHarness(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		req := new(dns.Msg)
		if err := req.Unpack(b); err != nil {
			return
		}
		h.take()
		resp := h.Answer(req)
		if resp.Id != req.Id || !resp.Response {
			t.Fatalf("reply header %+v to %+v", resp.MsgHdr, req.MsgHdr)
		}
		decided, logged := h.take()
		if len(decided) > 1 || len(logged) > 1 {
			t.Fatalf("decided %q, logged %+v for one message", decided, logged)
		}
		if len(resp.Answer) > 1 || len(resp.Ns) > 0 || len(resp.Extra) > 0 {
			t.Fatalf("reply carries %v %v %v", resp.Answer, resp.Ns, resp.Extra)
		}
		for _, rr := range resp.Answer {
			switch rr := rr.(type) {
			case *dns.A:
				name, reason := normalize(rr.Hdr.Name)
				if reason != "" || !allowOnly(name).Allow || rr.Hdr.Name != req.Question[0].Name {
					t.Fatalf("A record for %q (asked %q)", rr.Hdr.Name, req.Question[0].Name)
				}
				a, _ := netip.AddrFromSlice(rr.A.To4())
				if got, ok := h.table.Name(a); !ok || got != name {
					t.Fatalf("A record %s for %q holds %q", rr.A, name, got)
				}
			case *dns.PTR:
				if req.Question[0].Qtype != dns.TypePTR {
					t.Fatalf("PTR for %v", req.Question[0])
				}
			default:
				t.Fatalf("unexpected record %v", rr)
			}
		}
		if _, err := resp.Pack(); err != nil {
			t.Fatalf("reply does not pack: %v", err)
		}
	})
}
