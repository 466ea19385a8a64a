// pause and resume (connect): a memory pause keeps processes and files; a filesystem-only
// pause (keepMemory: false) keeps files but not processes.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { create, rejectsWith, alive } from './helpers.mjs'

// startSleeper starts a shell-backgrounded `sleep` (orphaned to the sandbox's init) and a
// background SDK command, and returns both pids.
async function startSleepers(sbx) {
  const r = await sbx.commands.run('sleep 1000 >/dev/null 2>&1 & echo $!')
  const shellPid = Number(r.stdout.trim())
  assert.ok(shellPid > 0, `pid of sleep: ${r.stdout}`)
  const h = await sbx.commands.run('sleep 1001', { background: true })
  await h.disconnect()
  assert.ok(await alive(sbx, shellPid))
  assert.ok(await alive(sbx, h.pid))
  return { shellPid, cmdPid: h.pid }
}

async function cmdline(sbx, pid) {
  const r = await sbx.commands.run(`tr '\\0' ' ' < /proc/${pid}/cmdline || true`)
  return r.stdout.trim()
}

describe('pause', () => {
  test('memory pause (default, then keepMemory: true) keeps processes and files', async () => {
    const sbx = await create({ metadata: { suite: 'pause-memory' } })
    const id = sbx.sandboxId
    await sbx.files.write('/home/user/kept.txt', 'still here')
    await sbx.commands.run('echo tmpfs-or-not > /tmp/in-tmp')
    const { shellPid, cmdPid } = await startSleepers(sbx)

    for (const opts of [undefined, { keepMemory: true }]) {
      const what = opts ? 'pause({keepMemory:true})' : 'pause()'
      assert.equal(await sbx.pause(opts), true, what)
      const info = await Sandbox.getInfo(id)
      assert.equal(info.state, 'paused', `state after ${what}`)
      assert.equal(await sbx.isRunning(), false, `isRunning after ${what}`)
      assert.equal(await Sandbox.pause(id), false, `pausing a paused sandbox returns false (${what})`)

      const back = await Sandbox.connect(id)
      assert.equal(back.sandboxId, id)
      assert.equal((await back.getInfo()).state, 'running', `state after resume from ${what}`)
      assert.equal(await back.isRunning(), true)
      assert.equal(await back.files.read('/home/user/kept.txt'), 'still here', `file after ${what}`)
      assert.equal(await back.files.read('/tmp/in-tmp'), 'tmpfs-or-not\n', `/tmp file after ${what}`)
      assert.ok(await alive(back, shellPid), `sleep pid ${shellPid} survives ${what}`)
      assert.match(await cmdline(back, shellPid), /^sleep 1000/)
      assert.ok(await alive(back, cmdPid), `background command pid ${cmdPid} survives ${what}`)
      const procs = await back.commands.list()
      assert.ok(procs.some((p) => p.pid === cmdPid), `commands.list() still has ${cmdPid} after ${what}`)
    }
    // The old handle works again too: envd calls go through the same id.
    assert.equal((await sbx.commands.run('echo ok')).stdout, 'ok\n')
    assert.equal(await sbx.commands.kill(cmdPid), true)
  })

  test('filesystem-only pause (keepMemory: false) keeps files but not processes', async () => {
    const sbx = await create({ envs: { SURVIVES: 'env' } })
    const id = sbx.sandboxId
    await sbx.files.write('/home/user/kept.txt', 'fs only')
    await sbx.files.write('/opt/data/x.bin', new Uint8Array([1, 2, 3]).buffer, { user: 'root' })
    const { shellPid, cmdPid } = await startSleepers(sbx)

    assert.equal(await sbx.pause({ keepMemory: false }), true)
    assert.equal((await Sandbox.getInfo(id)).state, 'paused')
    assert.equal(await sbx.isRunning(), false)

    const back = await sbx.connect()
    assert.equal((await back.getInfo()).state, 'running')
    assert.equal(await back.files.read('/home/user/kept.txt'), 'fs only')
    assert.deepEqual([...(await back.files.read('/opt/data/x.bin', { format: 'bytes' }))], [1, 2, 3])
    assert.equal((await back.files.getInfo('/opt/data/x.bin')).owner, 'root')
    const procs = await back.commands.list()
    assert.ok(!procs.some((p) => p.pid === cmdPid && p.args.some((a) => a.includes('sleep 1001'))),
      `the background command is gone: ${JSON.stringify(procs)}`)
    const r = await back.commands.run('pgrep -x sleep || true')
    assert.equal(r.stdout.trim(), '', `no sleep process after a filesystem-only pause (had ${shellPid}, ${cmdPid})`)
    // The sandbox's create-time envs still apply after the reboot.
    assert.equal((await back.commands.run('echo $SURVIVES')).stdout, 'env\n')
  })

  test('pause of an unknown sandbox is SandboxNotFoundError', async () => {
    await rejectsWith(Sandbox.pause('sb-doesnotexist'), SandboxNotFoundError, 'pause of an unknown id')
  })
})
