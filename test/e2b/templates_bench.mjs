// Cold build vs rebuild after changing only the last step, through the SDK's
// Template.build (run by BenchmarkE2BTemplateRebuild in templates_bench_test.go). Prints
// one JSON line: {"cold_ms": [...], "rebuild_ms": [...]}. Each cold build starts with a
// new marker in its first step, so nothing of it is cached.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { Template } from 'e2b'

const runs = Number(process.env.MOAT_BENCH_RUNS || 5)
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-tplbench-'))
fs.mkdirSync(path.join(dir, 'data'))
fs.writeFileSync(path.join(dir, 'data', 'f'), randomBytes(1 << 20))

const tmpl = (marker, last) => Template({ fileContextPath: dir })
  .fromTemplate('host')
  .runCmd(`echo ${marker} > /a`)
  .copy('data', '/data')
  .runCmd('echo b > /b')
  .runCmd(`echo ${last} > /c`)

const timed = async (t) => {
  const logs = []
  const t0 = performance.now()
  await Template.build(t, 'bench', { onBuildLogs: (e) => logs.push(e.message) })
  return { ms: performance.now() - t0, cached: logs.filter((l) => l.startsWith('CACHED ')).length }
}

const out = { cold_ms: [], rebuild_ms: [] }
try {
  for (let i = 0; i < runs; i++) {
    const marker = randomBytes(6).toString('hex')
    const cold = await timed(tmpl(marker, 'c'))
    if (cold.cached !== 0) throw new Error(`cold build used the cache (${cold.cached} CACHED)`)
    const warm = await timed(tmpl(marker, 'edited'))
    if (warm.cached !== 3) throw new Error(`rebuild took ${warm.cached} layers from the cache, want 3`)
    out.cold_ms.push(cold.ms)
    out.rebuild_ms.push(warm.ms)
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true })
}
console.log(JSON.stringify(out))
