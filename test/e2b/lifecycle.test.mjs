// The control plane: create with envs and metadata, getInfo, setTimeout, isRunning, kill,
// connect, list with filters and paging, and a sandbox's own timeout.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { create, rejectsWith, waitFor } from './helpers.mjs'

describe('lifecycle', () => {
  test('create with envs and metadata; getInfo reports them', async () => {
    const tag = randomUUID()
    const t0 = Date.now()
    const sbx = await create({ envs: { GREETING: 'hi there' }, metadata: { suite: 'lifecycle', tag } })
    assert.match(sbx.sandboxId, /\S/)
    assert.equal((await sbx.commands.run('echo "$GREETING"')).stdout, 'hi there\n')

    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.state, 'running')
    assert.deepEqual(info.metadata, { suite: 'lifecycle', tag })
    assert.ok(info.templateId, 'templateId is set')
    assert.ok(info.templateId === 'base' || info.name === 'base', `template: id ${info.templateId}, name ${info.name}`)
    assert.ok(info.startedAt instanceof Date && !isNaN(info.startedAt))
    assert.ok(Math.abs(info.startedAt.getTime() - t0) < 60_000, `startedAt ${info.startedAt.toISOString()}`)
    // No timeoutMs given: the E2B default is 300 s.
    const ttl = info.endAt.getTime() - info.startedAt.getTime()
    assert.ok(Math.abs(ttl - 300_000) < 5_000, `endAt - startedAt = ${ttl} ms, want about 300 s`)
    assert.match(info.envdVersion, /^\d+\.\d+\.\d+/)
    assert.ok(info.cpuCount > 0, `cpuCount ${info.cpuCount}`)
    assert.ok(info.memoryMB > 0, `memoryMB ${info.memoryMB}`)

    // The static form gives the same answer.
    const again = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(again.sandboxId, sbx.sandboxId)
    assert.deepEqual(again.metadata, info.metadata)
  })

  test('timeoutMs at create sets endAt; setTimeout moves it both ways', async () => {
    const sbx = await create({ timeoutMs: 120_000 })
    let info = await sbx.getInfo()
    const near = (at, ms) => Math.abs(at.getTime() - (Date.now() + ms)) < 10_000
    assert.ok(near(info.endAt, 120_000), `endAt ${info.endAt.toISOString()} is about now+120s`)

    await sbx.setTimeout(600_000)
    info = await sbx.getInfo()
    assert.ok(near(info.endAt, 600_000), `after setTimeout(600s): endAt ${info.endAt.toISOString()}`)

    await Sandbox.setTimeout(sbx.sandboxId, 30_000)
    info = await sbx.getInfo()
    assert.ok(near(info.endAt, 30_000), `after setTimeout(30s): endAt ${info.endAt.toISOString()}`)
    assert.equal(info.state, 'running')
  })

  test('a sandbox is killed when its timeout passes', async () => {
    const sbx = await create({ timeoutMs: 2_000 })
    assert.equal(await sbx.isRunning(), true)
    await waitFor('the sandbox to end at its timeout', async () => !(await sbx.isRunning()), 15_000)
    await rejectsWith(sbx.getInfo(), SandboxNotFoundError, 'getInfo after the timeout')
  })

  test('isRunning, kill, and what a killed sandbox answers', async () => {
    const sbx = await create()
    const id = sbx.sandboxId
    assert.equal(await sbx.isRunning(), true)
    assert.equal(await sbx.kill(), true)
    assert.equal(await sbx.isRunning(), false)
    assert.equal(await Sandbox.kill(id), false, 'killing a killed sandbox returns false')
    await rejectsWith(Sandbox.getInfo(id), SandboxNotFoundError, 'getInfo of a killed sandbox')
    await rejectsWith(Sandbox.connect(id), SandboxNotFoundError, 'connect to a killed sandbox')
    await rejectsWith(Sandbox.setTimeout(id, 10_000), SandboxNotFoundError, 'setTimeout of a killed sandbox')
    const listed = await Sandbox.list({ query: { metadata: { never: 'set' } } }).nextItems()
    assert.ok(!listed.some((s) => s.sandboxId === id))
  })

  test('Sandbox.kill by id', async () => {
    const sbx = await create()
    assert.equal(await Sandbox.kill(sbx.sandboxId), true)
    assert.equal(await sbx.isRunning(), false)
  })

  test('connect to a running sandbox shares its processes and files', async () => {
    const sbx = await create()
    await sbx.files.write('/tmp/shared.txt', 'shared')
    const h = await sbx.commands.run('sleep 600', { background: true })
    const other = await Sandbox.connect(sbx.sandboxId)
    assert.equal(other.sandboxId, sbx.sandboxId)
    assert.equal(await other.files.read('/tmp/shared.txt'), 'shared')
    assert.ok((await other.commands.list()).some((p) => p.pid === h.pid))
    assert.equal(await other.commands.kill(h.pid), true)
    // connect with a longer timeout extends it; a shorter one does not shorten it.
    await Sandbox.connect(sbx.sandboxId, { timeoutMs: 900_000 })
    let info = await sbx.getInfo()
    assert.ok(info.endAt.getTime() > Date.now() + 800_000, `endAt ${info.endAt.toISOString()} after connect(900s)`)
    await sbx.connect({ timeoutMs: 60_000 })
    info = await sbx.getInfo()
    assert.ok(info.endAt.getTime() > Date.now() + 800_000, `endAt ${info.endAt.toISOString()} after connect(60s)`)
  })

  test('getMetrics reports CPU, memory and disk of a running sandbox', async () => {
    const sbx = await create()
    await sbx.commands.run('head -c 20000000 /dev/urandom > /home/user/ballast')
    const ms = await waitFor('a metrics sample', async () => {
      const m = await sbx.getMetrics()
      return m.length ? m : null
    }, 15_000)
    const m = ms.at(-1)
    assert.ok(m.timestamp instanceof Date && !isNaN(m.timestamp), `timestamp ${m.timestamp}`)
    assert.ok(Math.abs(m.timestamp.getTime() - Date.now()) < 120_000, `timestamp ${m.timestamp.toISOString()} is recent`)
    assert.ok(m.cpuCount >= 1, `cpuCount ${m.cpuCount}`)
    assert.ok(m.cpuUsedPct >= 0, `cpuUsedPct ${m.cpuUsedPct}`)
    assert.ok(m.memTotal > 0 && m.memUsed > 0 && m.memUsed <= m.memTotal, `mem ${m.memUsed}/${m.memTotal}`)
    assert.ok(m.diskTotal > 0 && m.diskUsed >= 20_000_000 && m.diskUsed <= m.diskTotal, `disk ${m.diskUsed}/${m.diskTotal}`)
    await sbx.kill()
    await rejectsWith(sbx.getMetrics(), SandboxNotFoundError, 'getMetrics of a killed sandbox')
  })

  test('Sandbox.list filters by metadata and state and pages with limit', async () => {
    const tag = randomUUID()
    const boxes = await Promise.all([0, 1, 2].map((i) => create({ metadata: { listtag: tag, n: String(i) } })))
    const ids = boxes.map((b) => b.sandboxId).sort()
    // One that must not match.
    await create({ metadata: { listtag: 'other-' + tag } })

    const pager = Sandbox.list({ query: { metadata: { listtag: tag } }, limit: 2 })
    assert.equal(pager.hasNext, true)
    const page1 = await pager.nextItems()
    assert.equal(page1.length, 2, `page 1: ${JSON.stringify(page1.map((s) => s.sandboxId))}`)
    assert.equal(pager.hasNext, true, 'a second page follows')
    assert.ok(pager.nextToken, 'nextToken is set')
    const page2 = await pager.nextItems()
    assert.equal(page2.length, 1, `page 2: ${JSON.stringify(page2.map((s) => s.sandboxId))}`)
    assert.equal(pager.hasNext, false)
    assert.deepEqual([...page1, ...page2].map((s) => s.sandboxId).sort(), ids)
    for (const s of [...page1, ...page2]) {
      assert.equal(s.state, 'running')
      assert.equal(s.metadata.listtag, tag)
      assert.ok(s.templateId)
      assert.ok(s.startedAt instanceof Date && !isNaN(s.startedAt))
    }

    // Two metadata keys are ANDed.
    const one = await Sandbox.list({ query: { metadata: { listtag: tag, n: '1' } } }).nextItems()
    assert.deepEqual(one.map((s) => s.sandboxId), [boxes[1].sandboxId])

    // State filter: pause one.
    assert.equal(await boxes[0].pause(), true)
    const byState = async (state) =>
      (await Sandbox.list({ query: { metadata: { listtag: tag }, state } }).nextItems()).map((s) => s.sandboxId).sort()
    assert.deepEqual(await byState(['paused']), [boxes[0].sandboxId])
    assert.deepEqual(await byState(['running']), [boxes[1].sandboxId, boxes[2].sandboxId].sort())
    assert.deepEqual(await byState(['running', 'paused']), ids)
    assert.deepEqual(await byState(undefined), ids, 'the default is running and paused')

    // Order by start time.
    const asc = (await Sandbox.list({ query: { metadata: { listtag: tag } }, order: 'asc' }).nextItems())
    const times = asc.map((s) => s.startedAt.getTime())
    assert.deepEqual(times, [...times].sort((a, b) => a - b))

    // No match.
    assert.deepEqual(await Sandbox.list({ query: { metadata: { listtag: 'nobody-' + tag } } }).nextItems(), [])
  })

  test('metadata values with special characters survive the list filter', async () => {
    const tag = 'a b&c=d/é ' + randomUUID()
    const sbx = await create({ metadata: { 'odd.key_1': tag } })
    const got = await Sandbox.list({ query: { metadata: { 'odd.key_1': tag } } }).nextItems()
    assert.deepEqual(got.map((s) => s.sandboxId), [sbx.sandboxId])
    assert.equal(got[0].metadata['odd.key_1'], tag)
  })
})
