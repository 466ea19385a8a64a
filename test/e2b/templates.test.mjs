// Templates as code (issue 18): the SDK's Template() builder and Template.build() against
// moat. One template uses fromTemplate of a local base (host), copy of a directory (with
// owner and mode), runCmd (as root and as the template's user), aptInstall of a Debian
// package from a local flat apt repository (copied into the build, file: source: nothing
// leaves the machine), setEnvs, setWorkdir and a setStartCmd serving HTTP with
// waitForPort; a sandbox from it has the files, env and the running server as soon as
// Sandbox.create returns. A rebuild after changing only the last step reuses every
// earlier layer (CACHED lines in the build log, and time); a failing runCmd gives the
// SDK's BuildError with the step's output.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Template, Sandbox, BuildError, waitForPort } from 'e2b'
import { create, native, nativeSandbox, OTHER_API_KEY } from './helpers.mjs'

// makeRepo writes a flat apt repository (one .deb built with dpkg-deb, Packages, Release)
// into dir.
function makeRepo(dir) {
  const pkg = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-deb-'))
  fs.mkdirSync(path.join(pkg, 'DEBIAN'))
  fs.mkdirSync(path.join(pkg, 'usr', 'bin'), { recursive: true })
  fs.writeFileSync(path.join(pkg, 'DEBIAN', 'control'),
    'Package: moat-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: moat tests <t@example.invalid>\nDescription: a package from a local repository\n')
  fs.writeFileSync(path.join(pkg, 'usr', 'bin', 'moat-hello'), '#!/bin/sh\necho hello from a local deb\n', { mode: 0o755 })
  fs.mkdirSync(dir, { recursive: true })
  const deb = path.join(dir, 'moat-hello_1.0_all.deb')
  execFileSync('dpkg-deb', ['--root-owner-group', '--build', pkg, deb], { stdio: 'ignore' })
  fs.rmSync(pkg, { recursive: true, force: true })
  const data = fs.readFileSync(deb)
  const sha = (b) => createHash('sha256').update(b).digest('hex')
  const packages = 'Package: moat-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: moat tests <t@example.invalid>\n' +
    `Filename: ./moat-hello_1.0_all.deb\nSize: ${data.length}\nSHA256: ${sha(data)}\nDescription: a package from a local repository\n\n`
  fs.writeFileSync(path.join(dir, 'Packages'), packages)
  fs.writeFileSync(path.join(dir, 'Release'),
    `Origin: moat-test\nLabel: moat-test\nSuite: ./\nSHA256:\n ${sha(packages)} ${packages.length} Packages\n`)
}

// apt on the host template: it has the host's /usr (apt, dpkg) but no dpkg database.
const aptPrep = [
  'mkdir -p /var/lib/dpkg/info /var/lib/dpkg/updates /var/lib/dpkg/triggers /var/lib/dpkg/alternatives',
  'mkdir -p /var/lib/apt/lists/partial /var/cache/apt/archives/partial /var/log/apt /etc/apt/apt.conf.d /etc/apt/sources.list.d /etc/apt/preferences.d',
  'touch /var/lib/dpkg/status /var/lib/dpkg/available',
  'echo "deb [trusted=yes] file:/opt/repo ./" > /etc/apt/sources.list',
]

const suffix = randomBytes(3).toString('hex')

function appTemplate(ctxDir, version) {
  return Template({ fileContextPath: ctxDir })
    .fromTemplate('host')
    .copy('repo', '/opt/repo')
    .runCmd(aptPrep, { user: 'root' })
    .aptInstall(['moat-hello'])
    .copy('app', '/srv/app', { user: 'user', mode: 0o640 })
    .runCmd('echo built-by-$(id -un) > /srv/app/built.txt', { user: 'user' })
    .setEnvs({ GREETING: 'hello-env', SECOND: 'two words' })
    .setWorkdir('/srv/app')
    .runCmd(`echo ${version} > /srv/app/version.txt`, { user: 'root' })
    .setStartCmd('python3 -m http.server 8123 --bind 127.0.0.1', waitForPort(8123))
}

async function buildLogged(tmpl, name) {
  const logs = []
  const t0 = Date.now()
  await Template.build(tmpl, name, { onBuildLogs: (e) => logs.push(e.message) })
  return { logs, ms: Date.now() - t0 }
}

describe('templates as code', () => {
  let ctxDir
  const name = `tpl-app-${suffix}`
  before(() => {
    ctxDir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-tpl-'))
    makeRepo(path.join(ctxDir, 'repo'))
    fs.mkdirSync(path.join(ctxDir, 'app', 'sub'), { recursive: true })
    fs.writeFileSync(path.join(ctxDir, 'app', 'index.html'), '<h1>moat template</h1>\n')
    fs.writeFileSync(path.join(ctxDir, 'app', 'sub', 'data.txt'), 'nested file\n')
  })
  after(() => fs.rmSync(ctxDir, { recursive: true, force: true }))

  let first
  test('build: fromTemplate, copy, runCmd, aptInstall (local repo), setEnvs, setWorkdir, setStartCmd', async () => {
    first = await buildLogged(appTemplate(ctxDir, 'v1'), name)
    const text = first.logs.join('\n')
    assert.match(text, /step 3\/9: RUN apt-get update/, text)
    assert.doesNotMatch(text, /CACHED/, 'a first build has nothing in the cache')
    assert.ok(await Template.exists(name), 'Template.exists finds the built template')
  })

  test('a sandbox from it has the files, env, package and the running server at once', async () => {
    const sbx = await create({ template: name })
    const run = async (cmd, opts) => (await sbx.commands.run(cmd, opts)).stdout.trim()
    assert.equal(await run('cat /srv/app/index.html'), '<h1>moat template</h1>')
    assert.equal(await run('cat /srv/app/sub/data.txt'), 'nested file')
    assert.equal(await run("stat -c '%U %a' /srv/app/index.html"), 'user 640')
    assert.equal(await run('cat /srv/app/built.txt'), 'built-by-user')
    assert.equal(await run('cat /srv/app/version.txt'), 'v1')
    assert.equal(await run('echo "$GREETING/$SECOND"'), 'hello-env/two words')
    assert.equal(await run('moat-hello'), 'hello from a local deb')
    assert.match(await run("dpkg-query -W -f='${Status}' moat-hello"), /install ok installed/)
    // The start command serves the workdir; the ready check passed before create returned.
    assert.equal(await run('curl -s http://127.0.0.1:8123/index.html'), '<h1>moat template</h1>')
    assert.equal(await run(`python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8123/version.txt').read().decode().strip())"`), 'v1')
  })

  test('a rebuild after changing only the last step reuses every earlier layer', async () => {
    const again = await buildLogged(appTemplate(ctxDir, 'v2'), name)
    const text = again.logs.join('\n')
    const cached = again.logs.filter((l) => /^CACHED step \d+\/9/.test(l))
    // copy, runCmd, aptInstall, copy, runCmd, setWorkdir: every layer before the last step.
    assert.equal(cached.length, 6, text)
    assert.match(text, /Skipping upload of 'repo', already cached/)
    assert.match(text, /step 8\/9: RUN echo v2/)
    assert.doesNotMatch(text, /CACHED step 8\/9/)
    console.log(`# cold build ${first.ms} ms, rebuild after the last step changed ${again.ms} ms`)
    assert.ok(again.ms < first.ms, `rebuild ${again.ms} ms is not faster than the cold build ${first.ms} ms`)
    const sbx = await create({ template: name })
    assert.equal((await sbx.commands.run('cat /srv/app/version.txt')).stdout.trim(), 'v2')
    assert.equal((await sbx.commands.run('curl -s http://127.0.0.1:8123/version.txt')).stdout.trim(), 'v2')
  })

  test('after a filesystem-only pause, connect runs the start command again', async () => {
    const sbx = await create({ template: name })
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    const back = await sbx.connect()
    assert.equal((await back.commands.run('curl -s http://127.0.0.1:8123/version.txt')).stdout.trim(), 'v2')
  })

  test('a native create (POST /v1/sandboxes) runs the start command before it answers', async () => {
    const rec = await nativeSandbox({ template: name })
    // connect of a running sandbox starts nothing: the server is the create's.
    const sbx = await Sandbox.connect(rec.id)
    assert.equal((await sbx.commands.run('curl -s http://127.0.0.1:8123/version.txt')).stdout.trim(), 'v2')
  })

  test("another API key cannot rebuild, tag, untag or delete this key's template", async () => {
    assert.ok(OTHER_API_KEY, 'the harness makes a second key')
    await Template.assignTags(name, ['keep'])
    const stored = async () => (await native('GET', '/v1/templates')).body.filter((t) => t.name === name || t.name === `${name}.keep`)
    const before = await stored()
    assert.equal(before.length, 2)
    const other = { apiKey: OTHER_API_KEY }
    const refused = async (p, what) => {
      let err
      try {
        await p
      } catch (e) {
        err = e
      }
      assert.ok(err, `${what} by another key was accepted`)
      assert.match(err.message, /belongs to another API key/, `${what}: ${err.message}`)
    }
    await refused(Template.build(Template().fromTemplate('host').runCmd('echo hijacked > /srv/x'), name, other), 'rebuild')
    await refused(Template.assignTags(name, ['stolen'], other), 'tag')
    await refused(Template.removeTags(name, ['keep'], other), 'untag')
    await refused(Sandbox.deleteSnapshot(name, other), 'delete')
    // At the daemon: the template and its tag are as they were, no new tag.
    assert.deepEqual(await stored(), before)
    assert.equal(await Template.exists(`${name}:stolen`), false)
    // Still usable by the other key.
    const sbx = await Sandbox.create(name, other)
    try {
      assert.equal((await sbx.commands.run('cat /srv/app/version.txt')).stdout.trim(), 'v2')
    } finally {
      await sbx.kill()
    }
    await Template.removeTags(name, ['keep'])
  })

  test('fromTemplate of a template built here: its files, env and start command carry over', async () => {
    const child = `tpl-child-${suffix}`
    await Template.build(Template().fromTemplate(name).runCmd('cat /srv/app/version.txt > /srv/app/from-parent', { user: 'root' }), child)
    const sbx = await create({ template: child })
    assert.equal((await sbx.commands.run('cat /srv/app/from-parent; echo $GREETING; moat-hello')).stdout, 'v2\nhello-env\nhello from a local deb\n')
    assert.equal((await sbx.commands.run('curl -s http://127.0.0.1:8123/from-parent')).stdout.trim(), 'v2')
  })

  test('a failing runCmd gives BuildError with the step output', async () => {
    const bad = Template().fromTemplate('host')
      .runCmd('echo fine > /tmp/ok')
      .runCmd('echo output-of-the-failing-step; echo to-stderr >&2; exit 3')
    let err
    try {
      await Template.build(bad, `tpl-bad-${suffix}`)
    } catch (e) {
      err = e
    }
    assert.ok(err instanceof BuildError, `want BuildError, got ${err?.constructor?.name}: ${err?.message}`)
    assert.match(err.message, /exited with code 3/)
    assert.match(err.message, /output-of-the-failing-step/)
    assert.match(err.message, /to-stderr/)
    assert.equal(await Template.exists(`tpl-bad-${suffix}`), false, 'a failed build stores no template')
  })

  test('a start command whose ready check never passes fails the create with the reason', async () => {
    const tname = `tpl-notready-${suffix}`
    await Template.build(Template().fromTemplate('host').runCmd('true').setStartCmd('echo starting; exit 7', waitForPort(8999)), tname)
    let err
    try {
      await Sandbox.create(tname)
    } catch (e) {
      err = e
    }
    assert.ok(err, 'create fails')
    assert.match(err.message, /exited with code 7/)
    assert.match(err.message, /starting/)
  })

  test('tags: name:tag builds, creates and lists', async () => {
    const tname = `tpl-tag-${suffix}`
    await Template.build(Template().fromTemplate('host').runCmd('echo tagged > /tagged'), `${tname}:v1`, { cpuCount: 2, memoryMB: 768 })
    const sbx = await create({ template: `${tname}:v1` })
    assert.equal((await sbx.commands.run('cat /tagged')).stdout.trim(), 'tagged')
    // The build's cpuCount and memoryMB are the template's defaults at create.
    const info = await sbx.getInfo()
    assert.equal(info.cpuCount, 2)
    assert.equal(info.memoryMB, 768)
    const tags = await Template.getTags(tname)
    assert.deepEqual(tags.map((t) => t.tag), ['v1'])
    await Template.removeTags(tname, 'v1')
    assert.equal(await Template.exists(`${tname}:v1`), false, 'the tag is gone')
    assert.equal(await Template.exists(tname), true, 'the template stays')
  })
})
