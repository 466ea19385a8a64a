// autoResume: a sandbox created with lifecycle { onTimeout: 'pause', autoResume: true } is
// paused by its timeout and comes back on the next envd call (a command, a file read) with
// its processes and files, the caller seeing only latency; without autoResume the timeout's
// pause stays until Sandbox.connect().
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { create, waitFor, alive } from './helpers.mjs'

describe('autoResume', () => {
  test('a sandbox its timeout paused resumes on a command and on a file read', async () => {
    const sbx = await create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    const id = sbx.sandboxId
    assert.equal((await Sandbox.getInfo(id)).lifecycle.autoResume, true)
    await sbx.files.write('/home/user/auto.txt', 'auto-resumed')
    const r = await sbx.commands.run('sleep 1000 >/dev/null 2>&1 & echo $!')
    const pid = Number(r.stdout.trim())

    await waitFor('the timeout to pause the sandbox', async () => (await Sandbox.getInfo(id)).state === 'paused', 15_000)
    // A health probe (isRunning) is not traffic: it stays paused.
    assert.equal(await sbx.isRunning(), false)
    assert.equal((await Sandbox.getInfo(id)).state, 'paused')

    // A command resumes it (memory kept: the sleep is still there).
    assert.equal((await sbx.commands.run('cat /home/user/auto.txt')).stdout, 'auto-resumed')
    assert.equal((await Sandbox.getInfo(id)).state, 'running')
    assert.ok(await alive(sbx, pid), `sleep ${pid} survived the timeout's pause`)

    // Paused again by its timeout (armed again at the resume); a file read resumes it.
    await waitFor('the timeout to pause the sandbox again', async () => (await Sandbox.getInfo(id)).state === 'paused', 15_000)
    assert.equal(await sbx.files.read('/home/user/auto.txt'), 'auto-resumed')
    assert.equal((await Sandbox.getInfo(id)).state, 'running')
  })

  test('without autoResume the timeout pause stays until connect', async () => {
    const sbx = await create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause' } })
    const id = sbx.sandboxId
    await waitFor('the timeout to pause the sandbox', async () => (await Sandbox.getInfo(id)).state === 'paused', 15_000)
    await assert.rejects(sbx.commands.run('true'), 'a command in a paused sandbox without autoResume')
    assert.equal((await Sandbox.getInfo(id)).state, 'paused')
    const back = await Sandbox.connect(id)
    assert.equal((await back.commands.run('echo back')).stdout, 'back\n')
  })

  test('a paused sandbox the client paused is not resumed by traffic, even with autoResume', async () => {
    const sbx = await create({ timeoutMs: 60_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    assert.equal(await sbx.pause(), true)
    await assert.rejects(sbx.commands.run('true'), 'a command after an explicit pause')
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
  })
})
