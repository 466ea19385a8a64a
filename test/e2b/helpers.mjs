// Shared helpers for the e2b conformance tests. The harness (e2b_test.go) starts a real
// `moat serve` and sets E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY; the tests reach it
// only through the real e2b SDK, except where a test needs to send something the SDK
// never would (a wrong access token, an unsupported route), which goes through fetch.
import { after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

for (const name of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[name]) {
    throw new Error(`${name} is not set: run these tests through e2b_test.go (go test ./test/e2b/)`)
  }
}

export const API_URL = process.env.E2B_API_URL.replace(/\/$/, '')
export const SANDBOX_URL = process.env.E2B_SANDBOX_URL.replace(/\/$/, '')
export const API_KEY = process.env.E2B_API_KEY

// A key of the right shape that the daemon never issued.
export const WRONG_API_KEY = 'e2b_' + '0'.repeat(40)

const created = new Set()

// create makes a sandbox (template `base` unless opts.template is set) and kills it when
// the test file finishes, whatever happens in between.
export async function create(opts = {}) {
  const { template, ...rest } = opts
  const sbx = template ? await Sandbox.create(template, rest) : await Sandbox.create(rest)
  created.add(sbx.sandboxId)
  return sbx
}

// track registers a sandbox id (e.g. one created by another route) for the final cleanup.
export function track(id) {
  created.add(id)
}

after(async () => {
  await Promise.all([...created].map((id) => Sandbox.kill(id).catch(() => {})))
})

// rejectsWith awaits promise, asserts that it rejects with an instance of cls, and returns
// the error for further checks.
export async function rejectsWith(promise, cls, what = '') {
  let err
  try {
    await promise
  } catch (e) {
    err = e
  }
  assert.ok(err, `${what}: expected a ${cls.name}, but the call succeeded`)
  assert.ok(err instanceof cls, `${what}: expected a ${cls.name}, got ${err?.constructor?.name}: ${err?.message}`)
  return err
}

// waitFor polls cond (sync or async) every 50 ms until it returns a truthy value, and
// returns that value; it fails after timeoutMs.
export async function waitFor(what, cond, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await cond()
    if (v) return v
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

// envdUnary sends a raw Connect unary call to the sandbox's envd gateway, the way the SDK
// would, but with the headers the caller chooses.
export async function envdUnary(service, body, headers) {
  return fetch(`${SANDBOX_URL}/${service}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1', ...headers },
    body: JSON.stringify(body),
  })
}

// alive reports whether a process with this pid exists in the sandbox.
export async function alive(sbx, pid) {
  const r = await sbx.commands.run(`kill -0 ${pid} 2>/dev/null && echo yes || echo no`, { user: 'root' })
  return r.stdout.trim() === 'yes'
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// A second API key of the same daemon (the harness makes it), for what one key may not
// see or use of another's.
export const OTHER_API_KEY = process.env.MOAT_OTHER_API_KEY

// native calls moat's native API (/v1/…) over the same listener with an API key (Bearer),
// for what the E2B API does not show (a sandbox's runtime, lifecycle settings) or cannot
// make (a sandbox with no timeout, another runtime). It returns {status, body}.
export async function native(method, path, body, key = API_KEY) {
  const res = await fetch(`${API_URL}${path}`, {
    method,
    headers: { Authorization: `Bearer ${key}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  })
  const text = await res.text()
  let json
  try {
    json = text ? JSON.parse(text) : undefined
  } catch {
    json = text
  }
  return { status: res.status, body: json }
}

// nativeSandbox makes a sandbox through the native API (killed at the end like create's)
// and returns its record.
export async function nativeSandbox(req) {
  const r = await native('POST', '/v1/sandboxes', req)
  assert.equal(r.status, 201, `native create: ${JSON.stringify(r.body)}`)
  created.add(r.body.id)
  return r.body
}
