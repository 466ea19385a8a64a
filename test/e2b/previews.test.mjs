// Port previews: the sandbox's domain from create makes getHost(port) a URL of moat's
// listener (<port>-<id>.<domain>, resolved to 127.0.0.1 here by a lookup override: no
// wildcard DNS needed); it reaches an HTTP server in the sandbox with the sandbox's
// trafficAccessToken or an API key, and nothing without; a WebSocket echo works through
// it; @e2b/code-interpreter's port 49999 requests (E2b-Sandbox-Port through
// E2B_SANDBOX_URL) reach a server on that port.
import { describe, test, before } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import crypto from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Sandbox as CodeInterpreter } from '@e2b/code-interpreter'
import { create, waitFor, API_KEY } from './helpers.mjs'

const SERVER = readFileSync(new URL('../../internal/daemon/testdata/previewsrv.py', import.meta.url), 'utf8')

// A stand-in for the code interpreter on 49999: POST /contexts answers a context, POST
// /execute streams one stdout line and the execution count, as the real one does.
const INTERPRETER = `
import http.server, json, socketserver
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        leaked = [k for k in self.headers.keys() if k.lower() in ("x-access-token", "e2b-traffic-access-token", "x-api-key", "authorization")]
        if self.path.startswith("/contexts"):
            out = json.dumps({"id": "ctx-1", "language": body.get("language") or "python", "cwd": "/home/user"}).encode()
            ctype = "application/json"
        else:
            lines = [{"type": "stdout", "text": "ran " + body.get("code", "") + " leaked=" + ",".join(leaked) + "\\n"},
                     {"type": "number_of_executions", "execution_count": 1}]
            out = "".join(json.dumps(l) + "\\n" for l in lines).encode()
            ctype = "application/x-ndjson"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
S(("0.0.0.0", 49999), H).serve_forever()
`

// lookup resolves every name to 127.0.0.1 (where moat listens).
function lookup(_host, opts, cb) {
  if (opts && opts.all) return cb(null, [{ address: '127.0.0.1', family: 4 }])
  cb(null, '127.0.0.1', 4)
}

// get requests url with headers through the lookup override.
function get(url, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, lookup }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }))
    })
    req.on('error', reject)
  })
}

// startServer runs a server in the sandbox and waits until port accepts connections.
async function startServer(sbx, file, src, cmd, port) {
  await sbx.files.write(file, src)
  await sbx.commands.run(cmd, { background: true })
  await waitFor(`port ${port} in the sandbox`, async () => {
    const r = await sbx.commands.run(`(exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo up || true`)
    return r.stdout.includes('up')
  }, 20_000)
}

// wsEcho opens a WebSocket to url, sends msg and resolves with the echoed text.
function wsEcho(url, headers, msg) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, {
      lookup,
      headers: { ...headers, Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64') },
    })
    req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)))
    req.on('error', reject)
    req.on('upgrade', (res, socket, head) => {
      const data = Buffer.from(msg)
      const mask = crypto.randomBytes(4)
      const hdr = data.length < 126 ? Buffer.from([0x81, 0x80 | data.length]) : Buffer.from([0x81, 0x80 | 126, data.length >> 8, data.length & 255])
      socket.write(Buffer.concat([hdr, mask, data.map((b, i) => b ^ mask[i % 4])]))
      let buf = head
      socket.on('data', (d) => {
        buf = Buffer.concat([buf, d])
        if (buf.length < 2) return
        let n = buf[1] & 127
        let off = 2
        if (n === 126) {
          if (buf.length < 4) return
          n = buf.readUInt16BE(2)
          off = 4
        }
        if (buf.length < off + n) return
        socket.destroy()
        resolve(buf.subarray(off, off + n).toString())
      })
    })
    req.end()
  })
}

describe('previews', () => {
  let sbx
  before(async () => {
    sbx = await create()
    await startServer(sbx, '/tmp/previewsrv.py', SERVER, 'python3 /tmp/previewsrv.py 8080 /tmp/preview.log', 8080)
  })

  test('create returns the preview domain and a traffic token; getHost(port) reaches the server', async () => {
    assert.match(sbx.sandboxDomain, /^preview\.localhost:\d+$/)
    assert.ok(sbx.trafficAccessToken && sbx.trafficAccessToken.length >= 32, 'trafficAccessToken')
    const host = sbx.getHost(8080)
    assert.equal(host, `8080-${sbx.sandboxId}.${sbx.sandboxDomain}`)
    const withToken = await get(`http://${host}/page?a=1`, { 'e2b-traffic-access-token': sbx.trafficAccessToken })
    assert.equal(withToken.status, 200)
    assert.equal(withToken.body, 'sandbox-ok /page?a=1\n')
    const withKey = await get(`http://${host}/k`, { 'X-API-KEY': API_KEY })
    assert.equal(withKey.status, 200)
    assert.equal((await get(`http://${host}/`)).status, 404, 'no credentials')
    assert.equal((await get(`http://${host}/`, { 'e2b-traffic-access-token': 'mpt_wrong' })).status, 404, 'a wrong token')
    // Nothing listens on 8081.
    const none = await get(`http://${sbx.getHost(8081)}/`, { 'X-API-KEY': API_KEY })
    assert.equal(none.status, 502)
    // The sandbox's server never saw the token or the key.
    const log = await sbx.files.read('/tmp/preview.log')
    assert.ok(!log.includes(sbx.trafficAccessToken) && !log.includes(API_KEY), `the sandbox received moat's credentials: ${log}`)
  })

  test('E2b-Sandbox-Port through E2B_SANDBOX_URL needs the traffic token, the envd token or a key', async () => {
    const url = `${process.env.E2B_SANDBOX_URL}/hdr`
    const h = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8080' }
    const ask = async (more) => (await fetch(url, { headers: { ...h, ...more } })).status
    assert.equal(await ask({ 'e2b-traffic-access-token': sbx.trafficAccessToken }), 200)
    assert.equal(await ask({ 'X-API-KEY': API_KEY }), 200)
    assert.equal(await ask({}), 404, 'no credentials')
    assert.equal(await ask({ 'e2b-traffic-access-token': 'mpt_wrong' }), 404, 'a wrong token')
    assert.equal(await ask({ 'X-API-KEY': process.env.MOAT_OTHER_API_KEY }), 404, "another owner's key")
    // Only the requests that got through reached the sandbox's server.
    const log = await sbx.files.read('/tmp/preview.log')
    assert.equal(log.split('\n').filter((l) => l.includes('/hdr')).length, 2, log)
  })

  test('WebSocket echo through getHost', async () => {
    const got = await wsEcho(`http://${sbx.getHost(8080)}/ws`, { 'e2b-traffic-access-token': sbx.trafficAccessToken }, 'ping through moat')
    assert.equal(got, 'ping through moat')
  })

  test('@e2b/code-interpreter reaches port 49999', async () => {
    await startServer(sbx, '/tmp/interp.py', INTERPRETER, 'python3 /tmp/interp.py', 49999)
    const ci = await CodeInterpreter.connect(sbx.sandboxId)
    const ctx = await ci.createCodeContext({ language: 'python' })
    assert.equal(ctx.id, 'ctx-1')
    const ex = await ci.runCode('print(6*7)')
    assert.deepEqual(ex.logs.stdout, ['ran print(6*7) leaked=\n'])
    assert.equal(ex.executionCount, 1)
  })
})
