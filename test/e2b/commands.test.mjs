// commands.*: run with streaming, exit codes, env and cwd, timeouts, background commands,
// connect, list, stdin, kill, and the user a command runs as. One sandbox for the file:
// each test cleans up the processes it starts.
import { describe, test, before } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError, InvalidArgumentError, TimeoutError } from 'e2b'
import { create, rejectsWith, waitFor, alive } from './helpers.mjs'

describe('commands', () => {
  let sbx
  before(async () => {
    sbx = await create({ envs: { SBX_VAR: 'from-create', OVERRIDE_ME: 'create' } })
  })

  test('run returns stdout, stderr and exit code 0', async () => {
    const r = await sbx.commands.run('echo hello; echo oops >&2')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hello\n')
    assert.equal(r.stderr, 'oops\n')
  })

  test('onStdout and onStderr stream while the command runs', async () => {
    const out = []
    const errs = []
    let firstOut = 0
    const t0 = Date.now()
    const r = await sbx.commands.run('echo out1; echo err1 >&2; sleep 1; echo out2; echo err2 >&2', {
      onStdout: (d) => {
        if (!firstOut) firstOut = Date.now()
        out.push(d)
      },
      onStderr: (d) => errs.push(d),
    })
    const done = Date.now()
    assert.equal(out.join(''), 'out1\nout2\n')
    assert.equal(errs.join(''), 'err1\nerr2\n')
    assert.equal(r.stdout, 'out1\nout2\n')
    assert.equal(r.stderr, 'err1\nerr2\n')
    assert.ok(done - t0 >= 1000, 'the command sleeps 1 s')
    assert.ok(firstOut && done - firstOut >= 600,
      `first stdout chunk arrived ${done - firstOut} ms before the end: output is not streamed`)
  })

  test('a non-zero exit rejects with CommandExitError carrying stdout, stderr and exitCode', async () => {
    const err = await rejectsWith(sbx.commands.run('echo partial; echo bad >&2; exit 3'), CommandExitError, 'exit 3')
    assert.equal(err.exitCode, 3)
    assert.equal(err.stdout, 'partial\n')
    assert.equal(err.stderr, 'bad\n')
    assert.match(err.message, /3/, 'the message (end.error) names the exit status')
  })

  test('a missing program exits 127', async () => {
    const err = await rejectsWith(sbx.commands.run('no-such-program-xyz'), CommandExitError, 'missing program')
    assert.equal(err.exitCode, 127)
    assert.match(err.stderr, /not found/)
  })

  test('create-time envs apply to every command; per-command envs override them', async () => {
    let r = await sbx.commands.run('echo "$SBX_VAR/$OVERRIDE_ME"')
    assert.equal(r.stdout, 'from-create/create\n')
    r = await sbx.commands.run('echo "$SBX_VAR/$OVERRIDE_ME/$ONLY_HERE"', {
      envs: { OVERRIDE_ME: 'command', ONLY_HERE: 'x y' },
    })
    assert.equal(r.stdout, 'from-create/command/x y\n')
  })

  test('the default environment is the user login environment', async () => {
    const r = await sbx.commands.run('echo "$HOME|$USER|$PWD"')
    assert.equal(r.stdout, '/home/user|user|/home/user\n')
  })

  test('cwd sets the working directory; a missing cwd is an invalid argument', async () => {
    const r = await sbx.commands.run('pwd', { cwd: '/tmp' })
    assert.equal(r.stdout, '/tmp\n')
    await rejectsWith(sbx.commands.run('pwd', { cwd: '/does/not/exist' }), InvalidArgumentError, 'missing cwd')
  })

  test('timeoutMs: a command that runs too long rejects with TimeoutError and is killed', async () => {
    const t0 = Date.now()
    await rejectsWith(sbx.commands.run('sleep 10; echo marker-timeout', { timeoutMs: 1000 }), TimeoutError, 'sleep 10 with timeoutMs 1000')
    const took = Date.now() - t0
    assert.ok(took < 5000, `the timeout fired after ${took} ms`)
    // The daemon ends the process at the deadline too (the stream's Connect-Timeout-Ms).
    await waitFor('the timed-out command to be gone', async () => {
      const procs = await sbx.commands.list()
      return !procs.some((p) => p.args.some((a) => a.includes('marker-timeout')))
    }, 5000)
  })

  test('background: run returns a handle at once; wait gives the result', async () => {
    const chunks = []
    const t0 = Date.now()
    const h = await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.3; done', {
      background: true,
      onStdout: (d) => chunks.push(d),
    })
    assert.ok(Date.now() - t0 < 800, 'background run returned before the command finished')
    assert.equal(typeof h.pid, 'number')
    assert.ok(h.pid > 0)
    const r = await h.wait()
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, '1\n2\n3\n')
    assert.equal(chunks.join(''), '1\n2\n3\n')
  })

  test('list shows running commands; connect reattaches; sendStdin feeds stdin', async () => {
    const h = await sbx.commands.run('read line; echo "got:$line"; read line2; echo "got2:$line2"', {
      background: true,
      stdin: true,
    })
    try {
      const procs = await sbx.commands.list()
      const p = procs.find((x) => x.pid === h.pid)
      assert.ok(p, `commands.list() has pid ${h.pid}: ${JSON.stringify(procs)}`)
      assert.equal(p.cmd, '/bin/bash')
      assert.ok(p.args.some((a) => a.includes('got2:')), `args: ${JSON.stringify(p.args)}`)

      await sbx.commands.sendStdin(h.pid, 'first\n')
      await waitFor('first line echoed', () => h.stdout.includes('got:first'))
      await h.disconnect()

      const out = []
      const h2 = await sbx.commands.connect(h.pid, { onStdout: (d) => out.push(d) })
      assert.equal(h2.pid, h.pid)
      await h2.sendStdin('second\n')
      const r = await h2.wait()
      assert.equal(r.exitCode, 0)
      assert.match(out.join(''), /got2:second/)
      assert.doesNotMatch(out.join(''), /got:first/, 'connect delivers only output produced after it')
    } finally {
      await sbx.commands.kill(h.pid).catch(() => {})
    }
  })

  test('closeStdin sends EOF', async () => {
    const h = await sbx.commands.run('cat; echo eof', { background: true, stdin: true })
    await h.sendStdin('abc\n')
    await h.closeStdin()
    const r = await h.wait()
    assert.equal(r.stdout, 'abc\neof\n')
  })

  test('stdin is /dev/null unless asked for', async () => {
    const r = await sbx.commands.run('cat; echo done', { timeoutMs: 5000 })
    assert.equal(r.stdout, 'done\n')
  })

  test('kill ends a running command; killing it again returns false', async () => {
    const h = await sbx.commands.run('sleep 600', { background: true })
    assert.ok(await alive(sbx, h.pid), 'the command runs')
    assert.equal(await sbx.commands.kill(h.pid), true)
    const err = await rejectsWith(h.wait(), CommandExitError, 'wait on a killed command')
    assert.notEqual(err.exitCode, 0)
    assert.equal(await alive(sbx, h.pid), false)
    const procs = await sbx.commands.list()
    assert.ok(!procs.some((p) => p.pid === h.pid), 'a killed command leaves the list')
    assert.equal(await sbx.commands.kill(h.pid), false)
  })

  test('handle.kill kills the command', async () => {
    const h = await sbx.commands.run('sleep 600', { background: true })
    assert.equal(await h.kill(), true)
    await rejectsWith(h.wait(), CommandExitError, 'wait after handle.kill')
  })

  test('processes outlive a disconnected stream', async () => {
    const h = await sbx.commands.run('sleep 600', { background: true })
    await h.disconnect()
    await new Promise((r) => setTimeout(r, 300))
    assert.ok(await alive(sbx, h.pid), 'still running after disconnect')
    assert.equal(await sbx.commands.kill(h.pid), true)
  })

  test('commands run as the template user by default and as root when asked', async () => {
    let r = await sbx.commands.run('whoami; id -u; pwd')
    const [name, uid, dir] = r.stdout.split('\n')
    assert.deepEqual([name, dir], ['user', '/home/user'])
    assert.notEqual(uid, '0')
    r = await sbx.commands.run('whoami; id -u; pwd', { user: 'root' })
    assert.equal(r.stdout, 'root\n0\n/root\n')
    // Files a command creates belong to the user it runs as.
    await sbx.commands.run('touch /tmp/by-user')
    await sbx.commands.run('touch /tmp/by-root', { user: 'root' })
    r = await sbx.commands.run('stat -c %U /tmp/by-user /tmp/by-root')
    assert.equal(r.stdout, 'user\nroot\n')
    // The user cannot do what root can.
    await rejectsWith(sbx.commands.run('touch /etc/nope'), CommandExitError, 'user writing /etc')
    await sbx.commands.run('touch /etc/yes && rm /etc/yes', { user: 'root' })
  })

  test('the template user has passwordless sudo, as in the E2B base template', async () => {
    // The host template shows the host's /usr: this needs sudo installed on the host.
    const r = await sbx.commands.run('sudo -n whoami')
    assert.equal(r.stdout, 'root\n')
  })

  test('a large output arrives whole', async () => {
    const r = await sbx.commands.run('head -c 3000000 /dev/zero | tr "\\0" a')
    assert.equal(r.stdout.length, 3_000_000)
    assert.ok(/^a+$/.test(r.stdout))
  })
})
