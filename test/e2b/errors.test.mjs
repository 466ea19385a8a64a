// What a client sees when something is wrong: a wrong API key, a wrong envd access token,
// an unknown sandbox, a route moat does not serve, network options moat does not enforce;
// and the network option it does enforce (allowInternetAccess: false).
import { describe, test, before } from 'node:test'
import assert from 'node:assert/strict'
import {
  AuthenticationError, CommandExitError, NotFoundError, Sandbox, SandboxError, SandboxNotFoundError, Volume, VolumeError,
} from 'e2b'
import { create, rejectsWith, envdUnary, API_URL, API_KEY, SANDBOX_URL, WRONG_API_KEY } from './helpers.mjs'

describe('errors', () => {
  let sbx
  before(async () => {
    sbx = await create()
  })

  test('a wrong API key is AuthenticationError on every control-plane call', async () => {
    const opts = { apiKey: WRONG_API_KEY }
    await rejectsWith(Sandbox.create(opts), AuthenticationError, 'create')
    await rejectsWith(Sandbox.list(opts).nextItems(), AuthenticationError, 'list')
    await rejectsWith(Sandbox.getInfo(sbx.sandboxId, opts), AuthenticationError, 'getInfo')
    await rejectsWith(Sandbox.kill(sbx.sandboxId, opts), AuthenticationError, 'kill')
    await rejectsWith(Sandbox.connect(sbx.sandboxId, opts), AuthenticationError, 'connect')
    assert.equal(await sbx.isRunning(), true, 'the sandbox was not touched')
    // Raw: no key at all is 401 with a JSON message.
    const res = await fetch(`${API_URL}/v2/sandboxes`)
    assert.equal(res.status, 401)
    const body = await res.json()
    assert.equal(body.code, 401)
    assert.match(body.message, /\S/)
  })

  test('a wrong envd access token is refused (401) by the envd gateway', async () => {
    const hdr = (token) => ({
      'E2b-Sandbox-Id': sbx.sandboxId,
      'E2b-Sandbox-Port': '49983',
      ...(token === undefined ? {} : { 'X-Access-Token': token }),
    })
    let res = await envdUnary('process.Process/List', {}, hdr(sbx.envdAccessToken))
    assert.equal(res.status, 200, 'the right token works (control)')
    const ok = await res.json()
    assert.ok(Array.isArray(ok.processes ?? []))

    res = await envdUnary('process.Process/List', {}, hdr('wrong-token'))
    assert.equal(res.status, 401)
    assert.equal((await res.json()).code, 'unauthenticated', 'a Connect error body')
    res = await envdUnary('process.Process/List', {}, hdr(undefined))
    assert.equal(res.status, 401, 'no token at all')
    // Another sandbox's token does not open this one.
    const other = await create()
    res = await envdUnary('process.Process/List', {}, hdr(other.envdAccessToken))
    assert.equal(res.status, 401, "another sandbox's token")
    // REST too.
    res = await fetch(`${SANDBOX_URL}/files?path=/etc/os-release`, { headers: hdr('wrong-token') })
    assert.equal(res.status, 401)

    // Through the SDK: a Sandbox object holding a bogus token.
    const bogus = new Sandbox({ sandboxId: sbx.sandboxId, envdVersion: '0.6.4', envdAccessToken: 'bogus' })
    await rejectsWith(bogus.commands.run('true'), AuthenticationError, 'commands.run with a bogus token')
    await rejectsWith(bogus.files.read('/etc/os-release'), AuthenticationError, 'files.read with a bogus token')
    await rejectsWith(bogus.files.list('/'), AuthenticationError, 'files.list with a bogus token')
  })

  test('an unknown sandbox is NotFound', async () => {
    const err = await rejectsWith(Sandbox.connect('sb-doesnotexist'), SandboxNotFoundError, 'connect')
    assert.ok(err instanceof NotFoundError)
    await rejectsWith(Sandbox.getInfo('sb-doesnotexist'), SandboxNotFoundError, 'getInfo')
    await rejectsWith(Sandbox.setTimeout('sb-doesnotexist', 10_000), SandboxNotFoundError, 'setTimeout')
    assert.equal(await Sandbox.kill('sb-doesnotexist'), false, 'kill of an unknown sandbox')
    // envd for an id nobody has: isRunning() is false (502), never an exception.
    const ghost = new Sandbox({ sandboxId: 'sb-doesnotexist', envdVersion: '0.6.4', envdAccessToken: 'x' })
    assert.equal(await ghost.isRunning(), false)
    await rejectsWith(ghost.commands.run('true'), SandboxError, 'commands.run in an unknown sandbox')
  })

  test('an unsupported route is a clear 501', async () => {
    // (createSnapshot was the example until snapshots were served: snapshot.test.mjs.)
    const err = await rejectsWith(Volume.list(), VolumeError, 'Volume.list')
    assert.match(err.message, /^501: \S/, 'the message is "501: <what the server said>"')
    assert.equal(await sbx.isRunning(), true, 'the sandbox is still running after a refused call')

    for (const [method, path] of [['POST', '/secrets'], ['GET', '/sandboxes/' + sbx.sandboxId + '/logs']]) {
      const res = await fetch(API_URL + path, {
        method,
        headers: { 'X-API-KEY': API_KEY, 'Content-Type': 'application/json' },
        body: method === 'POST' ? '{"name":"x"}' : undefined,
      })
      assert.equal(res.status, 501, `${method} ${path}`)
      const body = await res.json()
      assert.equal(body.code, 501, `${method} ${path}`)
      assert.match(body.message, /\S{3}/, `${method} ${path} says what is unsupported`)
    }
    // Without a key, the answer is 401: nothing is served before authentication.
    const res = await fetch(API_URL + '/v3/templates', { method: 'POST', body: '{}' })
    assert.equal(res.status, 401)
  })

  test('an unknown envd RPC is a 404 (Connect: unimplemented) behind the access check', async () => {
    const hdr = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' }
    let res = await envdUnary('process.Process/NoSuchMethod', {}, { ...hdr, 'X-Access-Token': sbx.envdAccessToken })
    assert.equal(res.status, 404, 'connect-web reads an HTTP 404 as unimplemented')
    res = await envdUnary('process.Process/NoSuchMethod', {}, { ...hdr, 'X-Access-Token': 'wrong' })
    assert.equal(res.status, 401, 'nothing about the sandbox is revealed without its token')
  })

  test('allowInternetAccess: false — the sandbox reaches nothing', async () => {
    const closed = await create({ allowInternetAccess: false })
    const err = await rejectsWith(
      closed.commands.run('curl -sS --max-time 3 http://example.com', { timeoutMs: 20_000 }),
      CommandExitError, 'curl with no internet access')
    assert.notEqual(err.exitCode, 0)
    assert.equal(err.stdout, '')
    // DNS answers NXDOMAIN, not a timeout: curl fails at once.
    const t0 = Date.now()
    const dns = await rejectsWith(closed.commands.run('getent hosts example.com'), CommandExitError, 'getent')
    assert.equal(dns.exitCode, 2, 'getent: key not found')
    assert.ok(Date.now() - t0 < 2500, 'no resolver timeout')
    await rejectsWith(closed.commands.run('curl -sS --max-time 3 http://1.1.1.1'), CommandExitError, 'curl to an IP')
    const info = await closed.getInfo()
    assert.equal(info.allowInternetAccess, false)
  })

  test('updateNetwork({ allowInternetAccess: false }) closes a running sandbox', async () => {
    const box = await create()
    await box.updateNetwork({ allowInternetAccess: false })
    await rejectsWith(box.commands.run('curl -sS --max-time 3 http://example.com'), CommandExitError, 'curl after updateNetwork')
    assert.equal((await box.getInfo()).allowInternetAccess, false)
    const err = await rejectsWith(box.updateNetwork({ egressProxy: { address: 'proxy.example.com:1080' } }), SandboxError, 'updateNetwork with egressProxy')
    assert.equal(err.statusCode, 400, err.message)
    assert.match(err.message, /egressProxy/)
    await rejectsWith(Sandbox.updateNetwork('sb-doesnotexist', { allowInternetAccess: false }), SandboxNotFoundError, 'updateNetwork of an unknown sandbox')
  })

  test('network options moat does not enforce are refused with a 400 naming the field', async () => {
    const cases = [
      [{ network: { egressProxy: { address: 'proxy.example.com:1080' } } }, /egressProxy/],
      [{ network: { egressProxy: { address: 'proxy.example.com:1080', username: 'u', password: 'p' } }, metadata: { x: 'y' } }, /egressProxy/],
    ]
    for (const [opts, field] of cases) {
      const err = await rejectsWith(Sandbox.create(opts), SandboxError, JSON.stringify(opts))
      assert.equal(err.statusCode, 400, `${JSON.stringify(opts)}: ${err.message}`)
      assert.match(err.message, field)
    }
    // Nothing was left behind by the refused creates.
    const left = await Sandbox.list({ query: { metadata: { x: 'y' } } }).nextItems()
    assert.deepEqual(left, [])
  })

  test('a template moat does not know is a 4xx naming it', async () => {
    const err = await rejectsWith(Sandbox.create('no-such-template-xyz'), SandboxError, 'unknown template')
    assert.ok(err.statusCode === 400 || err.statusCode === 404, `status ${err.statusCode}: ${err.message}`)
    assert.match(err.message, /no-such-template-xyz/)
  })
})
