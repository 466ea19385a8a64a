package policy

import "testing"

func TestCoversRule(t *testing.T) {
	sets := map[string][]string{"mine": {"a.test", "nowhere.test"}}
	rules, err := Compile(Rules{Allow: []string{"a.test", "*.b.test", "10.0.0.0/8:443", "c.test:8000-8100"}}, sets)
	if err != nil {
		t.Fatal(err)
	}
	open, err := Compile(Rules{Net: NetAllowAll, Deny: []string{"deny.test"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p     *Policy
		entry string
		want  bool
	}{
		{rules, "a.test", true},
		{rules, " A.test:443 ", true},
		{rules, "other.test", false},
		{rules, "*.b.test", true},
		{rules, "x.b.test:22", true},
		{rules, "b.test", false},
		{rules, "*.a.test", false},
		{rules, "10.1.2.3:443", true},
		{rules, "10.0.0.0/16:443", true},
		{rules, "10.1.2.3:80", false},
		{rules, "10.1.2.3", true}, // on some port (443)
		{rules, "c.test:8000-8100", true},
		{rules, "c.test:8000-8200", true}, // its first port
		{rules, "c.test:7000-8100", false},
		{rules, "mine", true},        // a set one of whose members is covered
		{rules, "registries", false}, // none of the built-in set
		{rules, "https://a.test", false},
		{rules, "", false},
		{open, "anything.test", true},
		{open, "deny.test", false},
		{open, "10.0.0.1", true},
	} {
		if got := c.p.CoversRule(c.entry, sets); got != c.want {
			t.Errorf("%s covers %q = %v, want %v", c.p, c.entry, got, c.want)
		}
	}
}

// FuzzCoversRule: any entry is handled without a panic, and a rule a policy made of that
// rule alone allows is covered by it.
func FuzzCoversRule(f *testing.F) {
	for _, s := range []string{"a.test", "*.b.test", "10.0.0.0/8:443", "c.test:1-2", "registries", "", "*", "[::1]", "a.test:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, entry string) {
		self, err := Compile(Rules{Allow: []string{entry}}, nil)
		covered := self.CoversRule(entry, nil)
		if err == nil && !covered {
			t.Errorf("%q is not covered by a policy of itself (%s)", entry, self)
		}
	})
}
