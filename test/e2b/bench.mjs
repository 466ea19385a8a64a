// Time to interactive through the e2b SDK: Sandbox.create() until the first
// commands.run('true') has resolved. The kill after each run is not timed.
//
//   E2B_API_URL=… E2B_SANDBOX_URL=… E2B_API_KEY=… node bench.mjs [runs] [refill-ms]
//
// runs defaults to 30. Between runs the daemon's warm pool gets refill-ms (default 1000,
// untimed) to start a replacement, as in `moat bench`, so every run measures a warm create
// rather than however far the refill got. One uncounted warm-up run first loads the SDK's
// lazy modules and opens connections, as a long-lived client would have.
//
// Prints one JSON line: {"runs":N,"p50_ms":…,"p99_ms":…,"min_ms":…,"max_ms":…,
// "create_p50_ms":…,"run_p50_ms":…} — the last two split the p50 into Sandbox.create() and
// the first commands.run — with the percentiles computed as internal/bench does (index
// round(p·n)−1 of the sorted runs).
import { Sandbox } from 'e2b'

const runs = Number(process.argv[2] ?? 30)
const refillMs = Number(process.argv[3] ?? 1000)
if (!Number.isInteger(runs) || runs < 1 || !(refillMs >= 0)) {
  console.error(`usage: node bench.mjs [runs] [refill-ms]`)
  process.exit(2)
}

async function once() {
  await new Promise((r) => setTimeout(r, refillMs))
  const t0 = performance.now()
  const sbx = await Sandbox.create()
  const t1 = performance.now()
  try {
    await sbx.commands.run('true')
    const t2 = performance.now()
    return { total: t2 - t0, create: t1 - t0, run: t2 - t1 }
  } finally {
    await sbx.kill()
  }
}

await once()
const samples = []
for (let i = 0; i < runs; i++) samples.push(await once())
const pct = (key, p) => {
  const ms = samples.map((s) => s[key]).sort((a, b) => a - b)
  return Math.round(ms[Math.max(0, Math.min(ms.length - 1, Math.round(p * ms.length) - 1))] * 10) / 10
}
console.log(JSON.stringify({
  runs,
  p50_ms: pct('total', 0.5),
  p99_ms: pct('total', 0.99),
  min_ms: pct('total', 0),
  max_ms: pct('total', 1),
  create_p50_ms: pct('create', 0.5),
  run_p50_ms: pct('run', 0.5),
}))
