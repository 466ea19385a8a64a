package gitgate

import "testing"

// TestDecideNoPush: a policy with NoPush refuses every command, even a creation under the
// prefix that the same policy without it allows, with rule no-push and a reason saying so.
func TestDecideNoPush(t *testing.T) {
	const prefix = "refs/heads/agent/t/"
	no, err := Compile(PolicySpec{Prefix: prefix, NoPush: true})
	if err != nil {
		t.Fatal(err)
	}
	yes, err := Compile(PolicySpec{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{Commands: []Command{{z1, a1, prefix + "x"}, {a1, b1, "refs/heads/main"}}}
	if d := yes.Decide(&Request{Commands: req.Commands[:1]}, nil); !d.Allow {
		t.Fatalf("without NoPush a creation under the prefix is refused: %+v", d)
	}
	d := no.Decide(req, nil)
	if d.Allow {
		t.Fatal("NoPush allowed a push")
	}
	for _, v := range d.Verdicts {
		if v.Allow || v.Rule != RuleNoPush || v.Reason != "this sandbox may not push at all (its tier allows no push)" {
			t.Errorf("verdict %+v", v)
		}
	}
}
