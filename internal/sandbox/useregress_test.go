package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
)

func TestPortMap(t *testing.T) {
	// The layout: defaults, then every slot below the kernel's ephemeral ports.
	if last := slotPorts(UserSlots - 1); last.Hi != 32767 || slotPorts(0).Lo != DefaultPorts.Hi+1 {
		t.Errorf("layout: first slot %v, last %v, defaults %v", slotPorts(0), last, DefaultPorts)
	}
	users := []User{
		{Name: "bob", UID: 2002},
		{Name: "alice", UID: 2001},
		{Name: "carol", UID: 2001 + UserSlots}, // alice's slot
		{Name: "rooty", UID: 0},
	}
	ports, clash := PortMap(users)
	if len(ports) != 2 || ports[0].User != "alice" || ports[1].User != "bob" {
		t.Fatalf("ports: %+v", ports)
	}
	if want := slotPorts(2001 % UserSlots); ports[0].PortRange != want {
		t.Errorf("alice: %v, want %v", ports[0].PortRange, want)
	}
	if strings.Join(clash, ",") != "rooty,carol" {
		t.Errorf("clash: %v", clash)
	}
	// A user keeps its range while others come and go.
	alone, _ := PortMap([]User{{Name: "bob", UID: 2002}})
	if alone[0] != ports[1] {
		t.Errorf("bob's range moved: %v vs %v", alone[0], ports[1])
	}
	for _, c := range []struct {
		port  uint16
		user  string
		known bool
	}{
		{DefaultPorts.Lo, "", true},
		{DefaultPorts.Hi, "", true},
		{ports[0].Lo, "alice", true},
		{ports[0].Hi, "alice", true},
		{ports[1].Lo, "bob", true},
		{ports[1].Hi + 1, "", false}, // a slot nobody has
		{slotPorts(0).Lo, "", false},
		{40000, "", false}, // an ephemeral port: not rewritten
		{1023, "", false},
		{0, "", false},
	} {
		if u, k := UserOf(ports, c.port); u != c.user || k != c.known {
			t.Errorf("UserOf(%d) = %q %v, want %q %v", c.port, u, k, c.user, c.known)
		}
	}
}

func TestCheckUserEgress(t *testing.T) {
	sb := &Sandbox{
		ID: "sb-000000000001", Runtime: "runc",
		Policy: &policy.Spec{Phase: "run", Phases: map[string]policy.Rules{"run": {Allow: []string{"api.test", "*.example.test"}}}},
		Users: []User{
			{Name: "alice", UID: 2001}, {Name: "root-ish", UID: 2003, Sudo: true},
			{Name: "twin", UID: 2001 + UserSlots},
		},
		Credentials: []Credential{{Secret: "TOKEN", Hosts: []string{"api.test"}}},
	}
	runsc := *sb
	runsc.Runtime = "runsc"
	for _, c := range []struct {
		name string
		sb   *Sandbox
		user string
		ue   *UserEgress
		want string // "" ok
		is   error
	}{
		{"narrower", sb, "alice", &UserEgress{Allow: []string{"api.test"}, Credentials: []string{"TOKEN"}}, "", nil},
		{"none at all", sb, "alice", &UserEgress{}, "", nil},
		{"a wildcard within", sb, "alice", &UserEgress{Allow: []string{"www.example.test:443"}}, "", nil},
		{"clear", sb, "alice", nil, "", nil},
		{"clear a sudo user", sb, "root-ish", nil, "", nil},
		{"unknown user", sb, "nobody", &UserEgress{}, "no user", errdefs.ErrNotFound},
		{"sudo", sb, "root-ish", &UserEgress{}, "has sudo", errdefs.ErrInvalidArgument},
		{"runsc", &runsc, "alice", &UserEgress{}, "gVisor", errdefs.ErrUnavailable},
		{"shared slot", sb, "twin", &UserEgress{}, "source-port slot", errdefs.ErrInvalidArgument},
		{"bad rule", sb, "alice", &UserEgress{Allow: []string{"https://api.test"}}, "scheme", errdefs.ErrInvalidArgument},
		{"wider", sb, "alice", &UserEgress{Allow: []string{"api.test", "other.test"}}, "allows nothing that other.test names", errdefs.ErrInvalidArgument},
		{"unbound credential", sb, "alice", &UserEgress{Allow: []string{"api.test"}, Credentials: []string{"OTHER"}}, "not bound", errdefs.ErrInvalidArgument},
	} {
		err := checkUserEgress(c.sb, c.user, c.ue)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, c.is)):
			t.Errorf("%s: %v, want %q (%v)", c.name, err, c.want, c.is)
		}
	}
}
