// pty.*: create a terminal, type into it, resize it (checked with `stty size`), reconnect,
// kill it.
import { describe, test, before } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError } from 'e2b'
import { create, rejectsWith, waitFor, alive } from './helpers.mjs'

const enc = new TextEncoder()

describe('pty', () => {
  let sbx
  before(async () => {
    sbx = await create()
  })

  // terminal starts a PTY whose output accumulates in term.out (decoded as text).
  async function terminal(opts = {}) {
    const dec = new TextDecoder()
    const term = { out: '' }
    term.handle = await sbx.pty.create({
      cols: 80,
      rows: 24,
      timeoutMs: 0,
      onData: (d) => {
        term.out += dec.decode(d, { stream: true })
      },
      ...opts,
    })
    term.type = (s) => sbx.pty.sendInput(term.handle.pid, enc.encode(s))
    // until waits for output matching re that appeared after mark (an offset into out).
    term.until = (re, mark = 0, ms = 10_000) => waitFor(`terminal output ${re}`, () => re.exec(term.out.slice(mark)), ms)
    return term
  }

  test('create, sendInput, resize, kill', async () => {
    const term = await terminal()
    try {
      assert.ok(term.handle.pid > 0)
      let mark = term.out.length
      await term.type('stty size; echo "T=$TERM"; tty\n')
      await term.until(/(^|[\r\n])24 80\r?\n/, mark)
      await term.until(/T=xterm-256color/, mark)
      await term.until(/\/dev\/pts\/\d+/, mark)

      await sbx.pty.resize(term.handle.pid, { cols: 120, rows: 40 })
      mark = term.out.length
      await term.type('stty size\n')
      await term.until(/(^|[\r\n])40 120\r?\n/, mark)

      // A PTY is listed among the processes.
      const procs = await sbx.commands.list()
      assert.ok(procs.some((p) => p.pid === term.handle.pid), `pty pid ${term.handle.pid} is listed`)

      assert.equal(await sbx.pty.kill(term.handle.pid), true)
      await rejectsWith(term.handle.wait(), CommandExitError, 'wait on a killed PTY')
      assert.equal(await alive(sbx, term.handle.pid), false)
      assert.equal(await sbx.pty.kill(term.handle.pid), false)
    } finally {
      await sbx.pty.kill(term.handle.pid).catch(() => {})
    }
  })

  test('exit from the shell ends the PTY with its exit code', async () => {
    const term = await terminal()
    await term.type('exit 0\n')
    const r = await term.handle.wait()
    assert.equal(r.exitCode, 0)
  })

  test('control characters reach the terminal: ^C interrupts a foreground command', async () => {
    const term = await terminal()
    try {
      const mark = term.out.length
      await term.type('sleep 600\n')
      await new Promise((r) => setTimeout(r, 500))
      await term.type('\x03')
      await term.until(/\^C/, mark)
      await term.type('echo after-sleep-$?\n')
      await term.until(/after-sleep-130/, mark)
    } finally {
      await sbx.pty.kill(term.handle.pid).catch(() => {})
    }
  })

  test('pty.connect reattaches to a running terminal', async () => {
    const term = await terminal()
    try {
      await term.handle.disconnect()
      let out = ''
      const dec = new TextDecoder()
      const h2 = await sbx.pty.connect(term.handle.pid, {
        onData: (d) => {
          out += dec.decode(d, { stream: true })
        },
        timeoutMs: 0,
      })
      assert.equal(h2.pid, term.handle.pid)
      await term.type('echo reattached-$((6*7))\n')
      await waitFor('output through the new connection', () => out.includes('reattached-42'))
    } finally {
      await sbx.pty.kill(term.handle.pid).catch(() => {})
    }
  })

  test('a PTY runs as the template user by default and as root when asked, in cwd', async () => {
    const term = await terminal({ user: 'root', cwd: '/tmp', envs: { PTY_VAR: 'pv' } })
    try {
      const mark = term.out.length
      await term.type('echo "who=$(whoami) dir=$(pwd) var=$PTY_VAR"\n')
      await term.until(/who=root dir=\/tmp var=pv/, mark)
    } finally {
      await sbx.pty.kill(term.handle.pid).catch(() => {})
    }
    const t2 = await terminal()
    try {
      const mark = t2.out.length
      await t2.type('echo "who=$(whoami) dir=$(pwd)"\n')
      await t2.until(/who=user dir=\/home\/user/, mark)
    } finally {
      await sbx.pty.kill(t2.handle.pid).catch(() => {})
    }
  })
})
