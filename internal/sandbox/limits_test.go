package sandbox

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

// testHost is this machine's shape: 2 CPUs, 23.5 GiB, pid_max 32768, fs.file-max 2466126.
var testHost = Capacity{CPUs: 2, MemoryBytes: 24683584 << 10, Pids: 32768, FileMax: 2466126, DiskBytes: 100 << 30}

var testDefaults = Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 1024, DiskBytes: 10 << 30}

func TestEffectiveLimits(t *testing.T) {
	hostOnly := Ceilings{Host: testHost}
	daemonMax := Ceilings{Host: testHost, Daemon: Limits{MemoryBytes: 4 << 30, CPUs: 1, Pids: 512, DiskBytes: 20 << 30, IOBps: 100 << 20}}
	keyMax := Ceilings{Host: testHost, Daemon: daemonMax.Daemon, KeyID: "key-1", Key: Limits{MemoryBytes: 1 << 30, CPUs: 0.5, Pids: 128, DiskBytes: 1 << 30}}
	small := Ceilings{Host: testHost, FileBudget: 20000}
	for _, tc := range []struct {
		name string
		req  Limits
		c    Ceilings
		want Limits
		err  string // substring of the refusal; "" accepts
	}{
		{name: "defaults: fewer pids rather than fewer than 1024 files", c: hostOnly,
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 602, DiskBytes: 10 << 30, Nofile: 1024}},
		{name: "issue: cpus 1000", req: Limits{CPUs: 1000}, c: hostOnly, err: "cpus 1000 exceeds this host's 2 CPUs"},
		{name: "issue: memory 10^15", req: Limits{MemoryBytes: 1e15}, c: hostOnly, err: "memory 909.5 TiB exceeds this host's 23.5 GiB of memory"},
		{name: "issue: pids 10^6", req: Limits{Pids: 1e6}, c: hostOnly, err: "pids 1000000 exceeds this host's share of 8192 (1/4 of its 32768 pids)"},
		{name: "disk over the data fs", req: Limits{DiskBytes: 200 << 30}, c: hostOnly, err: "disk 200 GiB exceeds the data filesystem's size of 100 GiB"},
		{name: "host's pids share, but no files left", req: Limits{Pids: 8192}, c: hostOnly,
			err: "pids 8192 leaves each process fewer than 256 open files within this sandbox's open-file budget of 616531"},
		{name: "at the host's cpus", req: Limits{CPUs: 2, Pids: 2000}, c: hostOnly,
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 2000, DiskBytes: 10 << 30, Nofile: 308}},
		{name: "daemon max refuses", req: Limits{CPUs: 1.5}, c: daemonMax, err: "cpus 1.5 exceeds the daemon's maximum of 1"},
		{name: "daemon max clamps defaults", c: daemonMax,
			want: Limits{MemoryBytes: 2 << 30, CPUs: 1, Pids: 512, DiskBytes: 10 << 30, Nofile: 1204}},
		{name: "daemon io maximum", req: Limits{IOBps: 200 << 20}, c: daemonMax, err: "io_bps 209715200 exceeds the daemon's maximum of 104857600"},
		{name: "key max refuses memory", req: Limits{MemoryBytes: 2 << 30}, c: keyMax, err: "memory 2 GiB exceeds API key key-1's maximum of 1 GiB"},
		{name: "key max refuses pids", req: Limits{Pids: 256}, c: keyMax, err: "pids 256 exceeds API key key-1's maximum of 128"},
		{name: "daemon max below key max binds", req: Limits{Pids: 600}, c: Ceilings{Host: testHost, Daemon: Limits{Pids: 512}, Key: Limits{Pids: 1000}, KeyID: "k"},
			err: "pids 600 exceeds the daemon's maximum of 512"},
		{name: "key max clamps defaults", c: keyMax,
			want: Limits{MemoryBytes: 1 << 30, CPUs: 0.5, Pids: 128, DiskBytes: 1 << 30, Nofile: 4816}},
		{name: "within key max", req: Limits{MemoryBytes: 512 << 20, CPUs: 0.25, Pids: 64, DiskBytes: 256 << 20}, c: keyMax,
			want: Limits{MemoryBytes: 512 << 20, CPUs: 0.25, Pids: 64, DiskBytes: 256 << 20, Nofile: 9633}},
		{name: "nofile asked fits", req: Limits{Pids: 100, Nofile: 5000}, c: hostOnly,
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 100, DiskBytes: 10 << 30, Nofile: 5000}},
		{name: "nofile asked lowers default pids", req: Limits{Nofile: 65536}, c: hostOnly,
			err: "pids 1024 × nofile 65536 = 67108864 exceeds this sandbox's open-file budget"},
		{name: "nofile asked lowers default pids ok", req: Limits{Nofile: 20000}, c: hostOnly,
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 30, DiskBytes: 10 << 30, Nofile: 20000}},
		{name: "pids × nofile refused", req: Limits{Pids: 1024, Nofile: 65536}, c: hostOnly,
			err: "pids 1024 × nofile 65536 = 67108864 exceeds this sandbox's open-file budget of 616531 (pids × nofile, 1/4 of fs.file-max 2466126)"},
		{name: "small budget: pids asked", req: Limits{Pids: 40}, c: small,
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 40, DiskBytes: 10 << 30, Nofile: 500}},
		{name: "small budget: default pids lowered", c: small,
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 78, DiskBytes: 10 << 30, Nofile: 256}},
		{name: "small budget: too many pids", req: Limits{Pids: 100}, c: small,
			err: "pids 100 leaves each process fewer than 256 open files within this sandbox's open-file budget of 20000 (pids × nofile, the daemon's maximum)"},
		{name: "fs.file-max unknown", c: Ceilings{Host: Capacity{CPUs: 2}},
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 1024, DiskBytes: 10 << 30, Nofile: DefaultNofile}},
		{name: "negative", req: Limits{Pids: -1}, c: hostOnly, err: "pids -1 is not a valid limit"},
		{name: "NaN cpus", req: Limits{CPUs: math.NaN()}, c: hostOnly, err: "cpus NaN is not a valid limit"},
		{name: "tiny memory", req: Limits{MemoryBytes: 1 << 20}, c: hostOnly, err: "below the 32 MiB minimum"},
		{name: "tiny nofile", req: Limits{Nofile: 10}, c: hostOnly, err: "nofile 10 is below the minimum of 256"},
		{name: "tiny io", req: Limits{IOBps: 1000}, c: hostOnly, err: "io_bps 1000 is below the minimum of 1 MiB/s"},
		{name: "key may not loosen the default throttle", req: Limits{IOBps: 64 << 20},
			c:   Ceilings{Host: testHost, KeyID: "key-2", IODefaults: Limits{IOBps: 16 << 20, IOIops: 400}},
			err: "io_bps 67108864 exceeds the daemon's default of 16777216, which API key key-2's sandboxes may not exceed without the daemon's --max-io-bps"},
		{name: "key may tighten it", req: Limits{IOBps: 8 << 20, IOIops: 100},
			c:    Ceilings{Host: testHost, KeyID: "key-2", IODefaults: Limits{IOBps: 16 << 20, IOIops: 400}},
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 602, DiskBytes: 10 << 30, Nofile: 1024, IOBps: 8 << 20, IOIops: 100}},
		{name: "key within the daemon's io maximum", req: Limits{IOIops: 1000},
			c:    Ceilings{Host: testHost, KeyID: "key-2", Daemon: Limits{IOIops: 2000}, IODefaults: Limits{IOIops: 400}},
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 602, DiskBytes: 10 << 30, Nofile: 1024, IOIops: 1000}},
		{name: "operator may loosen the default throttle", req: Limits{IOBps: 64 << 20}, c: Ceilings{Host: testHost, IODefaults: Limits{IOBps: 16 << 20}},
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 602, DiskBytes: 10 << 30, Nofile: 1024, IOBps: 64 << 20}},
		{name: "io defaults from the daemon", c: hostOnly, req: Limits{IOIops: 500},
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 602, DiskBytes: 10 << 30, Nofile: 1024, IOIops: 500}},
		{name: "medium budget: default pids lowered to 256, then files", c: Ceilings{Host: testHost, FileBudget: 200000},
			want: Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 256, DiskBytes: 10 << 30, Nofile: 781}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EffectiveLimits(tc.req, testDefaults, tc.c)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("got %+v, %v; want an invalid-argument error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if budget := tc.c.fileBudget(); budget > 0 && got.Pids*got.Nofile > budget {
				t.Errorf("pids × nofile = %d exceeds the budget %d", got.Pids*got.Nofile, budget)
			}
		})
	}
}
