// Snapshots and fork through the e2b SDK (issue 12 item 5): createSnapshot,
// Sandbox.create(snapshotId or name), listSnapshots (filters, newest first, pages),
// deleteSnapshot, fork({count, timeoutMs}), what one API key may not do with another's
// snapshots, and the same through a runsc sandbox. Run by TestE2BSnapshots (a daemon with a
// drive pool, so snapshots and forks are copy-free clones).
//
// The last block ports E2B's own upstream tests (e2b-dev/E2B packages/js-sdk/tests/sandbox/
// snapshot.test.ts and fork.test.ts) case by case.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes, createHash, randomUUID } from 'node:crypto'
import { Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'
import { create, track, rejectsWith, native, nativeSandbox, OTHER_API_KEY, API_KEY } from './helpers.mjs'

const sha = (buf) => createHash('sha256').update(buf).digest('hex')

// fileHash is the sha256 of a file inside the sandbox, by the sandbox's own sha256sum.
async function fileHash(sbx, path) {
  const r = await sbx.commands.run(`sha256sum ${path}`)
  return r.stdout.split(' ')[0]
}

// snapshots lists every snapshot a paginator yields, page by page.
async function allPages(paginator) {
  const pages = []
  while (paginator.hasNext) pages.push(await paginator.nextItems())
  return pages
}

// cleanup deletes snapshots at the end of a test, whatever happened.
function snapshotCleanup(t) {
  const ids = []
  t.after(async () => {
    for (const id of ids) await Sandbox.deleteSnapshot(id).catch(() => {})
  })
  return (id) => ids.push(id)
}

// sandboxes gives a test its own create, nativeSandbox and fork tracking: what it makes is
// killed when the test ends (not only when the file ends), so the drive pool is not filled
// by the sandboxes of tests that are over.
function sandboxes(t) {
  const ids = new Set()
  t.after(async () => {
    await Promise.all([...ids].map((id) => Sandbox.kill(id).catch(() => {})))
  })
  return {
    create: async (opts) => {
      const s = await create(opts)
      ids.add(s.sandboxId)
      return s
    },
    native: async (req) => {
      const r = await nativeSandbox(req)
      ids.add(r.id)
      return r
    },
    forked: (results) => {
      for (const r of results) {
        if (r instanceof Sandbox) {
          ids.add(r.sandboxId)
          track(r.sandboxId)
        }
      }
      return results
    },
  }
}

describe('snapshots', () => {
  test('createSnapshot → Sandbox.create(snapshotId): the files are identical, later changes are not', async (t) => {
    const sb = sandboxes(t)
    const keep = snapshotCleanup(t)
    const sbx = await sb.create()
    const blob = randomBytes(1 << 20)
    await sbx.files.write('/home/user/blob.bin', blob.buffer.slice(blob.byteOffset, blob.byteOffset + blob.length))
    await sbx.files.write('/home/user/notes/a.txt', 'before the snapshot')
    await sbx.commands.run('ln -s notes/a.txt /home/user/link && chmod 640 /home/user/notes/a.txt')

    const snap = await sbx.createSnapshot()
    keep(snap.snapshotId)
    assert.match(snap.snapshotId, /^snap-[0-9a-f]{20}$/)
    assert.deepEqual(snap.names, [])
    // The parent keeps running and changes after the snapshot are not in it.
    assert.equal(await sbx.isRunning(), true)
    await sbx.files.write('/home/user/notes/a.txt', 'after the snapshot')
    await sbx.files.write('/home/user/later.txt', 'later')

    const clone = await sb.create({ template: snap.snapshotId })
    assert.notEqual(clone.sandboxId, sbx.sandboxId)
    assert.equal(await fileHash(clone, '/home/user/blob.bin'), sha(blob))
    const bytes = await clone.files.read('/home/user/blob.bin', { format: 'bytes' })
    assert.equal(sha(Buffer.from(bytes)), sha(blob), 'the bytes read back through the SDK')
    assert.equal(await clone.files.read('/home/user/notes/a.txt'), 'before the snapshot')
    assert.equal(await clone.files.exists('/home/user/later.txt'), false)
    const ls = await clone.commands.run('stat -c "%U %a" /home/user/notes/a.txt; readlink /home/user/link')
    assert.equal(ls.stdout, 'user 640\nnotes/a.txt\n', 'owner, mode and symlink kept')

    // The clone's writes are its own.
    await clone.files.write('/home/user/blob.bin', 'overwritten in the clone')
    assert.equal(await fileHash(sbx, '/home/user/blob.bin'), sha(blob))

    // An E2B sandbox from a snapshot is an E2B sandbox: a deadline, no idle stop, the
    // daemon's unused period (7 days).
    const rec = (await native('GET', `/v1/sandboxes/${clone.sandboxId}`)).body
    assert.equal(rec.snapshot, snap.snapshotId)
    assert.equal(rec.idle_seconds, 0, 'no idle stop for an E2B sandbox')
    assert.equal(rec.delete_after_seconds, 7 * 24 * 3600, 'the unused period is set as for any create')
    assert.ok(rec.expires_at, 'the E2B default timeout applies')
  })

  test('named snapshots: create by name boots the newest, a template name is refused', async (t) => {
    const sb = sandboxes(t)
    const keep = snapshotCleanup(t)
    const sbx = await sb.create()
    const name = `named-${randomUUID().slice(0, 8)}`
    await sbx.files.write('/home/user/v.txt', 'one')
    const first = await sbx.createSnapshot({ name })
    keep(first.snapshotId)
    assert.deepEqual(first.names, [name])
    await sbx.files.write('/home/user/v.txt', 'two')
    const second = await Sandbox.createSnapshot(sbx.sandboxId, { name })
    keep(second.snapshotId)
    assert.notEqual(second.snapshotId, first.snapshotId)

    const byName = await sb.create({ template: name })
    assert.equal(await byName.files.read('/home/user/v.txt'), 'two', 'a name boots its newest snapshot')
    const byID = await sb.create({ template: first.snapshotId })
    assert.equal(await byID.files.read('/home/user/v.txt'), 'one', 'an ID boots that snapshot')

    // A name a create would read as a template is taken (409); one shaped like an ID is refused (400).
    let err = await rejectsWith(sbx.createSnapshot({ name: 'base' }), SandboxError, 'a snapshot named base')
    assert.equal(err.statusCode, 409, err.message)
    assert.match(err.message, /template/)
    err = await rejectsWith(sbx.createSnapshot({ name: 'host' }), SandboxError, 'a snapshot named like a moat template')
    assert.equal(err.statusCode, 409, err.message)
    err = await rejectsWith(sbx.createSnapshot({ name: 'snap-0123' }), SandboxError, 'a name shaped like an ID')
    assert.equal(err.statusCode, 400, err.message)
    // And `base` still boots the template, never a snapshot.
    const base = await sb.create()
    assert.equal(await base.files.exists('/home/user/v.txt'), false)

    // Deleting by name removes every snapshot of that name.
    assert.equal(await Sandbox.deleteSnapshot(name), true)
    const left = await Sandbox.listSnapshots({ name }).nextItems()
    assert.deepEqual(left, [])
    assert.equal(await Sandbox.deleteSnapshot(first.snapshotId), false)
  })

  test('createSnapshot of a missing sandbox is SandboxNotFoundError', async (t) => {
    await rejectsWith(Sandbox.createSnapshot('sb-does-not-exist'), SandboxNotFoundError, 'createSnapshot of a missing sandbox')
  })

  test('listSnapshots: newest first, sandboxId and name filters, pages with nextToken', async (t) => {
    const sb = sandboxes(t)
    const keep = snapshotCleanup(t)
    const sbx = await sb.create()
    const other = await sb.create()
    const made = []
    for (let i = 0; i < 5; i++) {
      const s = await sbx.createSnapshot({ name: `page-${i}-${sbx.sandboxId}` })
      keep(s.snapshotId)
      made.push(s.snapshotId)
    }
    const theirs = await other.createSnapshot()
    keep(theirs.snapshotId)

    // The instance method lists this sandbox's snapshots only, newest first.
    const mine = (await sbx.listSnapshots().nextItems()).map((s) => s.snapshotId)
    assert.deepEqual(mine, [...made].reverse())

    // Pages of two: 2 + 2 + 1, in order, the last without a next token.
    const pages = await allPages(Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, limit: 2 }))
    assert.deepEqual(pages.map((p) => p.length), [2, 2, 1])
    assert.deepEqual(pages.flat().map((s) => s.snapshotId), [...made].reverse())

    // A token from one paginator resumes in another; a snapshot deleted meanwhile does not
    // shift the next page.
    const p1 = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, limit: 2 })
    const firstPage = await p1.nextItems()
    assert.ok(p1.nextToken, 'a next token after a full page')
    assert.equal(await Sandbox.deleteSnapshot(firstPage[0].snapshotId), true)
    const rest = await allPages(Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, limit: 2, nextToken: p1.nextToken }))
    assert.deepEqual(rest.flat().map((s) => s.snapshotId), [...made].reverse().slice(2))

    // The whole list has both sandboxes' snapshots, newest first.
    const everything = (await allPages(Sandbox.listSnapshots({ limit: 100 }))).flat().map((s) => s.snapshotId)
    assert.ok(everything.includes(theirs.snapshotId) && everything.includes(made[0]) && everything.includes(made[3]))
    assert.ok(everything.indexOf(theirs.snapshotId) < everything.indexOf(made[3]), 'newest first')

    // name filters by name or by ID; an unknown name is an empty list.
    const byName = await Sandbox.listSnapshots({ name: `page-3-${sbx.sandboxId}` }).nextItems()
    assert.deepEqual(byName, [{ snapshotId: made[3], names: [`page-3-${sbx.sandboxId}`] }])
    const byID = await Sandbox.listSnapshots({ name: theirs.snapshotId }).nextItems()
    assert.deepEqual(byID, [{ snapshotId: theirs.snapshotId, names: [] }])
    assert.deepEqual(await Sandbox.listSnapshots({ name: 'no-such-snapshot' }).nextItems(), [])

    // Bad queries are 400.
    for (const [what, opts] of [
      ['sandboxId and name together', { sandboxId: sbx.sandboxId, name: 'x' }],
      ['limit 0', { limit: 0 }],
      ['limit 101', { limit: 101 }],
      ['a token this server never gave', { nextToken: 'bm90LWEtdG9rZW4' }],
    ]) {
      const err = await rejectsWith(Sandbox.listSnapshots(opts).nextItems(), SandboxError, what)
      assert.equal(err.statusCode, 400, `${what}: ${err.message}`)
    }
  })

  test('deleteSnapshot: true, then false; Sandbox.create from it fails with 404', async (t) => {
    const sb = sandboxes(t)
    const sbx = await sb.create()
    const snap = await sbx.createSnapshot()
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    // The SDK's create turns a 404 into a SandboxError with that status (it has no
    // NotFoundError mapping for create).
    const err = await rejectsWith(Sandbox.create(snap.snapshotId), SandboxError, 'create from a deleted snapshot')
    assert.equal(err.statusCode, 404, err.message)
    assert.match(err.message, /not found/)
    assert.deepEqual(await Sandbox.listSnapshots({ name: snap.snapshotId }).nextItems(), [])
  })

  test('another API key sees, uses, deletes and forks none of them', async (t) => {
    const sb = sandboxes(t)
    assert.ok(OTHER_API_KEY && OTHER_API_KEY !== API_KEY, 'the harness gives a second key')
    const keep = snapshotCleanup(t)
    const sbx = await sb.create()
    await sbx.files.write('/home/user/secret.txt', 'mine')
    const snap = await sbx.createSnapshot({ name: `owned-${sbx.sandboxId}` })
    keep(snap.snapshotId)
    const as = { apiKey: OTHER_API_KEY }

    const listed = (await allPages(Sandbox.listSnapshots({ ...as, limit: 100 }))).flat()
    assert.ok(!listed.some((s) => s.snapshotId === snap.snapshotId), 'listed to another key')
    assert.deepEqual(await Sandbox.listSnapshots({ ...as, sandboxId: sbx.sandboxId }).nextItems(), [])
    assert.deepEqual(await Sandbox.listSnapshots({ ...as, name: snap.snapshotId }).nextItems(), [])
    for (const tmpl of [snap.snapshotId, `owned-${sbx.sandboxId}`]) {
      const err = await rejectsWith(Sandbox.create(tmpl, as), SandboxError, `another key creating from ${tmpl}`)
      assert.equal(err.statusCode, 404, err.message)
    }
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, as), false, 'another key deletes it')
    await rejectsWith(Sandbox.createSnapshot(sbx.sandboxId, as), SandboxNotFoundError, "another key snapshots the sandbox")
    await rejectsWith(Sandbox.fork(sbx.sandboxId, as), SandboxNotFoundError, 'another key forks the sandbox')
    // Still there for its owner.
    const back = await sb.create({ template: snap.snapshotId })
    assert.equal(await back.files.read('/home/user/secret.txt'), 'mine')
  })
})

describe('fork', () => {
  test('fork count 3: three running sandboxes with the parent files and distinct IDs', async (t) => {
    const sb = sandboxes(t)
    const parent = await sb.create({ metadata: { role: 'parent' } })
    const blob = randomBytes(256 << 10)
    await parent.files.write('/home/user/state.bin', blob.buffer.slice(blob.byteOffset, blob.byteOffset + blob.length))
    const before = Date.now()
    const forks = sb.forked(await parent.fork({ count: 3, timeoutMs: 120_000 }))
    assert.equal(forks.length, 3)
    for (const f of forks) assert.ok(f instanceof Sandbox, `a fork failed: ${f?.message}`)
    const ids = new Set([parent.sandboxId, ...forks.map((f) => f.sandboxId)])
    assert.equal(ids.size, 4, 'distinct IDs')
    const tokens = new Set([parent, ...forks].map((s) => s.envdAccessToken))
    assert.ok(![...tokens].some((x) => !x), 'every sandbox has an envd access token')
    assert.equal(tokens.size, 4, 'each fork has its own envd access token')

    for (const [i, f] of forks.entries()) {
      assert.equal(await f.isRunning(), true)
      assert.equal(await fileHash(f, '/home/user/state.bin'), sha(blob), `fork ${i} has the parent's file`)
      const r = await f.commands.run(`echo fork-${i} > /home/user/mine.txt && cat /home/user/mine.txt && whoami`)
      assert.equal(r.stdout, `fork-${i}\nuser\n`)
      const info = await f.getInfo()
      assert.equal(info.state, 'running')
      assert.deepEqual(info.metadata, { role: 'parent' }, 'metadata is inherited')
      const ttl = info.endAt.getTime() - before
      assert.ok(ttl > 100_000 && ttl < 140_000, `fork ${i}: endAt ${info.endAt.toISOString()} is about now + 120 s`)
    }
    // Each fork's writes are its own; the parent is untouched and still running.
    for (const [i, f] of forks.entries()) assert.equal(await f.files.read('/home/user/mine.txt'), `fork-${i}\n`)
    assert.equal(await parent.files.exists('/home/user/mine.txt'), false)
    assert.equal(await parent.isRunning(), true)
  })

  test('a fork without timeoutMs gets the E2B default; a fork of a native sandbox keeps its idle settings', async (t) => {
    const sb = sandboxes(t)
    const [f] = sb.forked(await Sandbox.fork((await sb.create()).sandboxId))
    assert.ok(f instanceof Sandbox)
    const info = await f.getInfo()
    const ttl = info.endAt.getTime() - Date.now()
    assert.ok(ttl > 280_000 && ttl < 310_000, `endAt is about now + 300 s, got +${ttl} ms`)

    // A native sandbox with a 2-minute idle period: its forks have the same.
    const nat = await sb.native({ template: 'host', idle_seconds: 120 })
    const [nf] = sb.forked(await Sandbox.fork(nat.id))
    assert.ok(nf instanceof Sandbox, nf?.message)
    const rec = (await native('GET', `/v1/sandboxes/${nf.sandboxId}`)).body
    assert.equal(rec.idle_seconds, 120, "the fork keeps the parent's idle period")
    assert.equal(rec.fork_of, nat.id)
  })

  test('fork of a missing or killed sandbox is SandboxNotFoundError; bad counts are 400', async (t) => {
    const sb = sandboxes(t)
    await rejectsWith(Sandbox.fork('sb-does-not-exist'), SandboxNotFoundError, 'fork of a missing sandbox')
    const sbx = await sb.create()
    await sbx.kill()
    await rejectsWith(sbx.fork(), SandboxNotFoundError, 'fork of a killed sandbox')
    const live = await sb.create()
    for (const count of [0, -1, 33]) {
      const err = await rejectsWith(live.fork({ count }), SandboxError, `fork count ${count}`)
      assert.equal(err.statusCode, 400, err.message)
    }
    const err = await rejectsWith(Sandbox.fork(live.sandboxId, { timeoutMs: 0 }), SandboxError, 'fork timeout 0')
    assert.equal(err.statusCode, 400, err.message)
  })
})

describe('runsc', () => {
  test('a runsc sandbox: snapshot, create from it and fork through E2B stay on runsc', async (t) => {
    const sb = sandboxes(t)
    const keep = snapshotCleanup(t)
    const nat = await sb.native({ template: 'host', runtime: 'runsc' })
    const sbx = await Sandbox.connect(nat.id)
    await sbx.files.write('/home/user/gvisor.txt', 'under runsc')
    const snap = await sbx.createSnapshot()
    keep(snap.snapshotId)

    const clone = await sb.create({ template: snap.snapshotId })
    assert.equal(await clone.files.read('/home/user/gvisor.txt'), 'under runsc')
    assert.equal((await native('GET', `/v1/sandboxes/${clone.sandboxId}`)).body.runtime, 'runsc')
    const k = await clone.commands.run('dmesg 2>/dev/null | head -1; true')
    assert.match(k.stdout, /gVisor|^$/, 'dmesg under gVisor')

    const forks = sb.forked(await sbx.fork({ count: 2 }))
    for (const f of forks) {
      assert.ok(f instanceof Sandbox, f?.message)
      assert.equal((await native('GET', `/v1/sandboxes/${f.sandboxId}`)).body.runtime, 'runsc')
      assert.equal((await f.commands.run('cat /home/user/gvisor.txt')).stdout, 'under runsc')
    }
  })
})

// Ports of e2b-dev/E2B's own tests (packages/js-sdk/tests/sandbox/snapshot.test.ts and
// fork.test.ts), same cases and assertions, node:test instead of vitest.
describe('upstream e2b-dev/E2B snapshot.test.ts', () => {
  test('create a snapshot from sandbox', async (t) => {
    const sb = sandboxes(t)
    const sandbox = await sb.create()
    await sandbox.files.write('/home/user/test.txt', 'snapshot test content')
    const snapshot = await sandbox.createSnapshot()
    assert.equal(typeof snapshot.snapshotId, 'string')
    assert.ok(snapshot.snapshotId.length > 0)
    await Sandbox.deleteSnapshot(snapshot.snapshotId)
  })

  test('create sandbox from snapshot', async (t) => {
    const sb = sandboxes(t)
    const testContent = 'content from original sandbox'
    const sandbox = await sb.create()
    await sandbox.files.write('/home/user/test.txt', testContent)
    const snapshot = await sandbox.createSnapshot()
    try {
      const newSandbox = await Sandbox.create(snapshot.snapshotId, { metadata: { sandboxTestId: 'from-snapshot' } })
      try {
        assert.equal(await newSandbox.files.read('/home/user/test.txt'), testContent)
      } finally {
        await newSandbox.kill()
      }
    } finally {
      await Sandbox.deleteSnapshot(snapshot.snapshotId)
    }
  })

  test('create multiple sandboxes from same snapshot', async (t) => {
    const sb = sandboxes(t)
    const testContent = 'shared snapshot content'
    const sandbox = await sb.create()
    await sandbox.files.write('/home/user/shared.txt', testContent)
    const snapshot = await sandbox.createSnapshot()
    try {
      const sandbox1 = await Sandbox.create(snapshot.snapshotId, { metadata: { sandboxTestId: 'branch-1' } })
      const sandbox2 = await Sandbox.create(snapshot.snapshotId, { metadata: { sandboxTestId: 'branch-2' } })
      try {
        assert.equal(await sandbox1.files.read('/home/user/shared.txt'), testContent)
        assert.equal(await sandbox2.files.read('/home/user/shared.txt'), testContent)
        await sandbox1.files.write('/home/user/shared.txt', 'modified in sandbox1')
        assert.equal(await sandbox1.files.read('/home/user/shared.txt'), 'modified in sandbox1')
        assert.equal(await sandbox2.files.read('/home/user/shared.txt'), testContent)
      } finally {
        await sandbox1.kill()
        await sandbox2.kill()
      }
    } finally {
      await Sandbox.deleteSnapshot(snapshot.snapshotId)
    }
  })

  test('list snapshots', async (t) => {
    const sb = sandboxes(t)
    const sandbox = await sb.create()
    const snapshot = await sandbox.createSnapshot()
    try {
      const paginator = Sandbox.listSnapshots()
      assert.equal(paginator.hasNext, true)
      const snapshots = await paginator.nextItems()
      assert.ok(Array.isArray(snapshots))
      assert.ok(snapshots.find((s) => s.snapshotId === snapshot.snapshotId))
    } finally {
      await Sandbox.deleteSnapshot(snapshot.snapshotId)
    }
  })

  test('list snapshots for specific sandbox', async (t) => {
    const sb = sandboxes(t)
    const sandbox = await sb.create()
    const snapshot = await sandbox.createSnapshot()
    try {
      const snapshots = await sandbox.listSnapshots().nextItems()
      assert.ok(snapshots.find((s) => s.snapshotId === snapshot.snapshotId))
    } finally {
      await Sandbox.deleteSnapshot(snapshot.snapshotId)
    }
  })

  test('delete snapshot', async (t) => {
    const sb = sandboxes(t)
    const sandbox = await sb.create()
    const snapshot = await sandbox.createSnapshot()
    assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId), false)
  })

  test('snapshot preserves file system state', async (t) => {
    const sb = sandboxes(t)
    const appDir = '/home/user/app'
    const sandbox = await sb.create()
    await sandbox.files.makeDir(appDir)
    await sandbox.files.write(`${appDir}/config.json`, '{"env": "test"}')
    await sandbox.files.write(`${appDir}/data.txt`, 'important data')
    const snapshot = await sandbox.createSnapshot()
    try {
      const newSandbox = await Sandbox.create(snapshot.snapshotId, { metadata: { sandboxTestId: 'fs-test' } })
      try {
        assert.equal(await newSandbox.files.exists(appDir), true)
        assert.equal(await newSandbox.files.read(`${appDir}/config.json`), '{"env": "test"}')
        assert.equal(await newSandbox.files.read(`${appDir}/data.txt`), 'important data')
      } finally {
        await newSandbox.kill()
      }
    } finally {
      await Sandbox.deleteSnapshot(snapshot.snapshotId)
    }
  })
})

describe('upstream e2b-dev/E2B fork.test.ts', () => {
  test('fork a sandbox', async (t) => {
    const sb = sandboxes(t)
    const sandbox = await sb.create()
    await sandbox.files.write('/home/user/state.txt', 'state before fork')
    const forks = sb.forked(await sandbox.fork())
    assert.equal(forks.length, 1)
    const fork = forks[0]
    assert.ok(fork instanceof Sandbox)
    try {
      assert.notEqual(fork.sandboxId, sandbox.sandboxId)
      assert.equal(await sandbox.isRunning(), true)
      assert.equal(await fork.isRunning(), true)
      assert.equal(await fork.files.read('/home/user/state.txt'), 'state before fork')
      await fork.files.write('/home/user/state.txt', 'modified in fork')
      assert.equal(await sandbox.files.read('/home/user/state.txt'), 'state before fork')
    } finally {
      await fork.kill()
    }
  })

  test('fork a sandbox multiple times', async (t) => {
    const sb = sandboxes(t)
    const sandbox = await sb.create()
    const forks = sb.forked(await sandbox.fork({ count: 2, timeoutMs: 60_000 }))
    assert.equal(forks.length, 2)
    const forkedSandboxes = forks.filter((f) => f instanceof Sandbox)
    try {
      assert.equal(forkedSandboxes.length, 2)
      const ids = new Set(forkedSandboxes.map((s) => s.sandboxId))
      assert.equal(ids.size, 2)
      assert.equal(ids.has(sandbox.sandboxId), false)
      for (const fork of forkedSandboxes) assert.equal(await fork.isRunning(), true)
    } finally {
      await Promise.all(forkedSandboxes.map((s) => s.kill()))
    }
  })

  test('fork a sandbox by ID with the static method', async (t) => {
    const sb = sandboxes(t)
    const sandbox = await sb.create()
    const forks = sb.forked(await Sandbox.fork(sandbox.sandboxId))
    assert.equal(forks.length, 1)
    const fork = forks[0]
    assert.ok(fork instanceof Sandbox)
    try {
      assert.equal(await fork.isRunning(), true)
    } finally {
      await fork.kill()
    }
  })

  test('fork a killed sandbox fails', async (t) => {
    const sandbox = await Sandbox.create()
    await sandbox.kill()
    await rejectsWith(sandbox.fork(), SandboxNotFoundError, 'fork of a killed sandbox')
  })

  // Upstream expects InvalidArgumentError, which a newer SDK throws before sending; the
  // pinned 2.51.0 sends the request, and sbx-test does not exist here (404 before the
  // count is read: SandboxNotFoundError, a SandboxError). The 400 for a bad count of a
  // real sandbox is asserted in 'fork' above.
  test('fork with count lower than 1 fails', async (t) => {
    await rejectsWith(Sandbox.fork('sbx-test', { count: 0 }), SandboxError, 'fork count 0')
  })
})
