package daemon

import (
	"context"
	"log/slog"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/internal/usage"
)

// Metering (issue 16): the sampler loop that feeds the usage ledger, and GET /v1/usage.

// DefaultMeterInterval is how often the sampler reads the sandboxes' cgroups.
const DefaultMeterInterval = 15 * time.Second

// usageLedger is the store as apiserver.UsageLedger. A report first records the API calls
// counted since the last flush, so it includes them.
type usageLedger struct {
	st    *store.Store
	calls *usage.Calls
	log   *slog.Logger
}

func (u usageLedger) Usage(ctx context.Context, since, until time.Time, owner *string) ([]v1.UsageRow, map[string]int64, error) {
	flushCalls(u.st, u.calls, u.log)
	return u.st.Usage(ctx, store.UsageQuery{Since: since, Until: until, Owner: owner}, time.Now())
}

// startMetering wires the ledger: the manager samples into st, the API counts calls and
// serves GET /v1/usage, and a loop samples every Config.MeterInterval (and flushes the
// API-call counts). Other periodic counters can ride on the same loop: add them to
// meterOnce.
func (d *Daemon) startMetering(st *store.Store) {
	log := d.log.With("component", "metering")
	calls := &usage.Calls{}
	d.Manager.SetUsageLedger(st)
	d.api.SetUsage(usageLedger{st, calls, log}, calls)
	every := d.cfg.MeterInterval
	if every <= 0 {
		every = DefaultMeterInterval
	}
	d.every("metering", every, func() { d.meterOnce(st, calls, log) }, func() { flushCalls(st, calls, log) })
}

// meterOnce takes one sample of every live sandbox and flushes the API-call counts.
func (d *Daemon) meterOnce(st *store.Store, calls *usage.Calls, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d.Manager.Meter(ctx)
	flushCalls(st, calls, log)
}

func flushCalls(st *store.Store, calls *usage.Calls, log *slog.Logger) {
	n := calls.Take()
	if len(n) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.AddAPICalls(ctx, n, time.Now()); err != nil {
		calls.Restore(n)
		log.Warn("recording API calls", "err", err)
	}
}
