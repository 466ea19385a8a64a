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
// Prints one JSON line: {"runs":N,"p50_ms":…,"p99_ms":…,"min_ms":…,"max_ms":…}, with the
// percentiles computed as internal/bench does (index round(p·n)−1 of the sorted runs).
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
  try {
    await sbx.commands.run('true')
    return performance.now() - t0
  } finally {
    await sbx.kill()
  }
}

await once()
const ms = []
for (let i = 0; i < runs; i++) ms.push(await once())
ms.sort((a, b) => a - b)
const pct = (p) => ms[Math.max(0, Math.min(ms.length - 1, Math.round(p * ms.length) - 1))]
const round = (x) => Math.round(x * 10) / 10
console.log(JSON.stringify({ runs, p50_ms: round(pct(0.5)), p99_ms: round(pct(0.99)), min_ms: round(ms[0]), max_ms: round(ms.at(-1)) }))
