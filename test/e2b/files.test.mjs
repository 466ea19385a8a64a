// files.*: write and read in every form the SDK offers, listing, stat, directories, rename,
// remove, watching, gzip, metadata, ownership, and the signed upload/download URLs.
import { describe, test, before } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { gzipSync } from 'node:zlib'
import { FileNotFoundError, FileType, FilesystemEventType } from 'e2b'
import { create, rejectsWith, waitFor, SANDBOX_URL } from './helpers.mjs'

const H = '/home/user'

describe('files', () => {
  let sbx
  before(async () => {
    sbx = await create()
  })

  test('write and read text', async () => {
    const info = await sbx.files.write(`${H}/t/hello.txt`, 'hello, wörld\n')
    assert.equal(info.path, `${H}/t/hello.txt`)
    assert.equal(info.name, 'hello.txt')
    assert.equal(info.type, FileType.FILE)
    assert.equal(await sbx.files.read(`${H}/t/hello.txt`), 'hello, wörld\n')
    const r = await sbx.commands.run(`cat ${H}/t/hello.txt`)
    assert.equal(r.stdout, 'hello, wörld\n', 'the file is really in the sandbox')
    // Overwrite.
    await sbx.files.write(`${H}/t/hello.txt`, 'second')
    assert.equal(await sbx.files.read(`${H}/t/hello.txt`), 'second')
  })

  test('relative paths resolve against the user home', async () => {
    const info = await sbx.files.write('rel/r.txt', 'relative')
    assert.equal(info.path, `${H}/rel/r.txt`)
    assert.equal(await sbx.files.read(`${H}/rel/r.txt`), 'relative')
    assert.equal(await sbx.files.read('rel/r.txt'), 'relative')
  })

  test('an empty file', async () => {
    await sbx.files.write(`${H}/empty`, '')
    assert.equal(await sbx.files.read(`${H}/empty`), '')
    assert.equal((await sbx.files.getInfo(`${H}/empty`)).size, 0)
  })

  test('write and read bytes, blob and stream', async () => {
    const data = new Uint8Array(256 * 4)
    for (let i = 0; i < data.length; i++) data[i] = i % 256
    await sbx.files.write(`${H}/bin/all.bin`, data.buffer)
    const got = await sbx.files.read(`${H}/bin/all.bin`, { format: 'bytes' })
    assert.ok(got instanceof Uint8Array)
    assert.deepEqual(Buffer.from(got), Buffer.from(data))

    const blob = await sbx.files.read(`${H}/bin/all.bin`, { format: 'blob' })
    assert.deepEqual(Buffer.from(await blob.arrayBuffer()), Buffer.from(data))

    // A bigger random file read as a stream arrives in order and whole.
    const big = randomBytes(3 << 20)
    await sbx.files.write(`${H}/bin/big.bin`, new Blob([big]))
    const stream = await sbx.files.read(`${H}/bin/big.bin`, { format: 'stream' })
    const chunks = []
    for await (const c of stream) chunks.push(c)
    assert.ok(Buffer.concat(chunks).equals(big), 'streamed read equals what was written')
    const sum = await sbx.commands.run(`sha256sum ${H}/bin/big.bin | cut -d' ' -f1`)
    const { createHash } = await import('node:crypto')
    assert.equal(sum.stdout.trim(), createHash('sha256').update(big).digest('hex'))
  })

  test('write from a ReadableStream (octet-stream upload)', async () => {
    const parts = ['one ', 'two ', 'three']
    const rs = new ReadableStream({
      start(c) {
        for (const p of parts) c.enqueue(new TextEncoder().encode(p))
        c.close()
      },
    })
    const info = await sbx.files.write(`${H}/streamed.txt`, rs)
    assert.equal(info.path, `${H}/streamed.txt`)
    assert.equal(await sbx.files.read(`${H}/streamed.txt`), 'one two three')
  })

  test('write many files at once', async () => {
    const entries = [
      { path: `${H}/many/a.txt`, data: 'A' },
      { path: `${H}/many/sub/b.txt`, data: 'B' },
      { path: '/tmp/many-c.bin', data: new Uint8Array([0, 1, 2, 255]).buffer },
    ]
    const infos = await sbx.files.write(entries)
    assert.ok(Array.isArray(infos))
    assert.deepEqual(infos.map((i) => i.path).sort(), entries.map((e) => e.path).sort())
    assert.equal(await sbx.files.read(`${H}/many/a.txt`), 'A')
    assert.equal(await sbx.files.read(`${H}/many/sub/b.txt`), 'B')
    assert.deepEqual([...(await sbx.files.read('/tmp/many-c.bin', { format: 'bytes' }))], [0, 1, 2, 255])
    // writeFiles is the same operation.
    const again = await sbx.files.writeFiles([{ path: `${H}/many/d.txt`, data: 'D' }])
    assert.equal(again.length, 1)
    assert.equal(await sbx.files.read(`${H}/many/d.txt`), 'D')
  })

  test('list with depth', async () => {
    await sbx.files.write([
      { path: `${H}/ls/top.txt`, data: '1' },
      { path: `${H}/ls/d1/mid.txt`, data: '22' },
      { path: `${H}/ls/d1/d2/deep.txt`, data: '333' },
    ])
    const paths = async (depth) =>
      (await sbx.files.list(`${H}/ls`, depth ? { depth } : undefined)).map((e) => e.path).sort()
    assert.deepEqual(await paths(), [`${H}/ls/d1`, `${H}/ls/top.txt`])
    assert.deepEqual(await paths(1), [`${H}/ls/d1`, `${H}/ls/top.txt`])
    assert.deepEqual(await paths(2), [`${H}/ls/d1`, `${H}/ls/d1/d2`, `${H}/ls/d1/mid.txt`, `${H}/ls/top.txt`])
    assert.deepEqual(await paths(3), [
      `${H}/ls/d1`, `${H}/ls/d1/d2`, `${H}/ls/d1/d2/deep.txt`, `${H}/ls/d1/mid.txt`, `${H}/ls/top.txt`,
    ])
    const entries = await sbx.files.list(`${H}/ls`)
    const top = entries.find((e) => e.name === 'top.txt')
    assert.equal(top.type, FileType.FILE)
    assert.equal(top.size, 1)
    assert.equal(entries.find((e) => e.name === 'd1').type, FileType.DIR)
    await rejectsWith(sbx.files.list(`${H}/no-such-dir`), FileNotFoundError, 'list of a missing dir')
  })

  test('getInfo and exists', async () => {
    const before = Date.now()
    await sbx.files.write(`${H}/info.txt`, '12345')
    const i = await sbx.files.getInfo(`${H}/info.txt`)
    assert.equal(i.name, 'info.txt')
    assert.equal(i.path, `${H}/info.txt`)
    assert.equal(i.type, FileType.FILE)
    assert.equal(i.size, 5)
    assert.equal(i.owner, 'user')
    assert.equal(i.group, 'user')
    assert.match(i.permissions, /^-rw-/)
    assert.equal(typeof i.mode, 'number')
    assert.ok(i.modifiedTime instanceof Date)
    assert.ok(Math.abs(i.modifiedTime.getTime() - before) < 60_000, `modifiedTime ${i.modifiedTime.toISOString()} is now`)

    const d = await sbx.files.getInfo(H)
    assert.equal(d.type, FileType.DIR)
    assert.equal(d.name, 'user')

    await sbx.commands.run(`ln -sf ${H}/info.txt ${H}/link`)
    const l = await sbx.files.getInfo(`${H}/link`)
    assert.equal(l.symlinkTarget, `${H}/info.txt`)

    assert.equal(await sbx.files.exists(`${H}/info.txt`), true)
    assert.equal(await sbx.files.exists(H), true)
    assert.equal(await sbx.files.exists(`${H}/nope.txt`), false)
    await rejectsWith(sbx.files.getInfo(`${H}/nope.txt`), FileNotFoundError, 'getInfo of a missing file')
    await rejectsWith(sbx.files.read(`${H}/nope.txt`), FileNotFoundError, 'read of a missing file')
  })

  test('makeDir, rename, remove', async () => {
    assert.equal(await sbx.files.makeDir(`${H}/mk/a/b`), true)
    assert.equal(await sbx.files.makeDir(`${H}/mk/a/b`), false, 'makeDir of an existing dir returns false')
    assert.equal((await sbx.files.getInfo(`${H}/mk/a/b`)).type, FileType.DIR)

    await sbx.files.write(`${H}/mk/a/b/f.txt`, 'move me')
    const moved = await sbx.files.rename(`${H}/mk/a/b/f.txt`, `${H}/mk/g.txt`)
    assert.equal(moved.path, `${H}/mk/g.txt`)
    assert.equal(moved.name, 'g.txt')
    assert.equal(await sbx.files.exists(`${H}/mk/a/b/f.txt`), false)
    assert.equal(await sbx.files.read(`${H}/mk/g.txt`), 'move me')

    const dir = await sbx.files.rename(`${H}/mk/a`, `${H}/mk/a2`)
    assert.equal(dir.type, FileType.DIR)
    assert.equal(await sbx.files.exists(`${H}/mk/a2/b`), true)
    await rejectsWith(sbx.files.rename(`${H}/mk/missing`, `${H}/mk/x`), FileNotFoundError, 'rename of a missing file')

    await sbx.files.remove(`${H}/mk/g.txt`)
    assert.equal(await sbx.files.exists(`${H}/mk/g.txt`), false)
    await sbx.files.remove(`${H}/mk`) // a non-empty directory goes with its content
    assert.equal(await sbx.files.exists(`${H}/mk`), false)
  })

  test('watchDir (recursive) reports a file created in a subdirectory', async () => {
    await sbx.files.makeDir(`${H}/w/sub`)
    const events = []
    const handle = await sbx.files.watchDir(`${H}/w`, (e) => events.push(e), { recursive: true, timeoutMs: 0 })
    try {
      await sbx.files.write(`${H}/w/sub/new.txt`, 'x')
      await sbx.files.write(`${H}/w/top.txt`, 'y')
      await waitFor('a create event for sub/new.txt', () =>
        events.find((e) => e.name === 'sub/new.txt' && e.type === FilesystemEventType.CREATE))
      await waitFor('a create event for top.txt', () =>
        events.find((e) => e.name === 'top.txt' && e.type === FilesystemEventType.CREATE))
      await sbx.files.remove(`${H}/w/sub/new.txt`)
      await waitFor('a remove event for sub/new.txt', () =>
        events.find((e) => e.name === 'sub/new.txt' && e.type === FilesystemEventType.REMOVE))
    } finally {
      await handle.stop()
    }
    // After stop, no more events arrive.
    const n = events.length
    await sbx.files.write(`${H}/w/after-stop.txt`, 'z')
    await new Promise((r) => setTimeout(r, 500))
    assert.ok(!events.slice(n).some((e) => e.name === 'after-stop.txt'), 'no events after stop')
  })

  test('watchDir (not recursive) does not report subdirectory events', async () => {
    await sbx.files.makeDir(`${H}/wn/sub`)
    const events = []
    const handle = await sbx.files.watchDir(`${H}/wn`, (e) => events.push(e), { timeoutMs: 0 })
    try {
      await sbx.files.write(`${H}/wn/sub/inner.txt`, 'x')
      await sbx.files.write(`${H}/wn/outer.txt`, 'y')
      await waitFor('a create event for outer.txt', () => events.find((e) => e.name === 'outer.txt'))
      assert.ok(!events.some((e) => e.name.includes('inner.txt')), `events: ${JSON.stringify(events)}`)
    } finally {
      await handle.stop()
    }
    await rejectsWith(sbx.files.watchDir(`${H}/no-such-dir`, () => {}), FileNotFoundError, 'watching a missing dir')
  })

  test('gzip: write and read with gzip', async () => {
    const text = 'compress me '.repeat(10_000)
    await sbx.files.write(`${H}/gz.txt`, text, { gzip: true })
    assert.equal(await sbx.files.read(`${H}/gz.txt`), text, 'a gzip upload is stored decompressed')
    assert.equal(await sbx.files.read(`${H}/gz.txt`, { gzip: true }), text)
    const bytes = await sbx.files.read(`${H}/gz.txt`, { gzip: true, format: 'bytes' })
    assert.equal(Buffer.from(bytes).toString(), text)
    const r = await sbx.commands.run(`wc -c < ${H}/gz.txt`)
    assert.equal(Number(r.stdout.trim()), text.length)

    // On the wire: the daemon really sends gzip when asked.
    const res = await fetch(`${SANDBOX_URL}/files?path=${encodeURIComponent(`${H}/gz.txt`)}`, {
      headers: {
        'E2b-Sandbox-Id': sbx.sandboxId,
        'E2b-Sandbox-Port': '49983',
        'X-Access-Token': sbx.envdAccessToken,
        'Accept-Encoding': 'gzip',
      },
    })
    assert.equal(res.status, 200)
    assert.equal(res.headers.get('content-encoding'), 'gzip')
    assert.equal(await res.text(), text) // fetch decodes
    // A raw gzip upload with Content-Encoding is decoded too.
    const up = await fetch(`${SANDBOX_URL}/files?path=${encodeURIComponent(`${H}/gz2.txt`)}`, {
      method: 'POST',
      headers: {
        'E2b-Sandbox-Id': sbx.sandboxId,
        'E2b-Sandbox-Port': '49983',
        'X-Access-Token': sbx.envdAccessToken,
        'Content-Type': 'application/octet-stream',
        'Content-Encoding': 'gzip',
      },
      body: gzipSync(Buffer.from('raw gzip body')),
    })
    assert.equal(up.status, 200, await up.clone().text())
    assert.equal(await sbx.files.read(`${H}/gz2.txt`), 'raw gzip body')
  })

  test('metadata: written with a file, read back by getInfo and list', async () => {
    const info = await sbx.files.write(`${H}/meta.txt`, 'm', { metadata: { Owner: 'alice', purpose: 'test' } })
    assert.deepEqual(info.metadata, { owner: 'alice', purpose: 'test' }, 'keys come back lowercased')
    const i = await sbx.files.getInfo(`${H}/meta.txt`)
    assert.deepEqual(i.metadata, { owner: 'alice', purpose: 'test' })
    const listed = (await sbx.files.list(H)).find((e) => e.name === 'meta.txt')
    assert.deepEqual(listed.metadata, { owner: 'alice', purpose: 'test' })
    const moved = await sbx.files.rename(`${H}/meta.txt`, `${H}/meta2.txt`)
    assert.deepEqual(moved.metadata, { owner: 'alice', purpose: 'test' }, 'metadata follows a rename')
    await sbx.files.write(`${H}/plain.txt`, 'p')
    const plain = await sbx.files.getInfo(`${H}/plain.txt`)
    assert.equal(plain.metadata, undefined, 'no metadata on a file written without it')
  })

  test('ownership: files are written as the default user, or as root when asked', async () => {
    await sbx.files.write('/tmp/own-user.txt', 'u')
    await sbx.files.write('/tmp/own-root.txt', 'r', { user: 'root' })
    assert.equal((await sbx.files.getInfo('/tmp/own-user.txt')).owner, 'user')
    assert.equal((await sbx.files.getInfo('/tmp/own-root.txt')).owner, 'root')
    const r = await sbx.commands.run('stat -c %U:%G /tmp/own-user.txt /tmp/own-root.txt')
    assert.equal(r.stdout, 'user:user\nroot:root\n')
    // Directories created along the way belong to the writer too.
    await sbx.files.write(`${H}/owned/deep/f.txt`, 'x')
    assert.equal((await sbx.files.getInfo(`${H}/owned/deep`)).owner, 'user')
    // A relative path is relative to the writer's home.
    const ri = await sbx.files.write('root-rel.txt', 'rr', { user: 'root' })
    assert.equal(ri.path, '/root/root-rel.txt')
    // The user cannot write where it has no permission.
    await assert.rejects(sbx.files.write('/etc/nope.txt', 'x'), 'user writing to /etc is refused')
    assert.equal(await sbx.files.exists('/etc/nope.txt'), false)
    // makeDir as root.
    await sbx.files.makeDir('/opt/rootdir', { user: 'root' })
    assert.equal((await sbx.files.getInfo('/opt/rootdir')).owner, 'root')
  })

  test('signed uploadUrl and downloadUrl work with plain fetch (no headers)', async () => {
    const up = await sbx.uploadUrl(`${H}/signed/up.txt`)
    assert.match(up, /signature=v1_/)
    assert.ok(up.startsWith(SANDBOX_URL + '/files?'), up)
    const form = new FormData()
    form.append('file', new Blob(['uploaded through a signed url']), 'up.txt')
    let res = await fetch(up, { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.clone().text())
    assert.equal(await sbx.files.read(`${H}/signed/up.txt`), 'uploaded through a signed url')

    const down = await sbx.downloadUrl(`${H}/signed/up.txt`)
    res = await fetch(down)
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'uploaded through a signed url')

    // With an expiration.
    const exp = await sbx.downloadUrl(`${H}/signed/up.txt`, { useSignatureExpiration: 60 })
    assert.match(exp, /signature_expiration=\d+/)
    res = await fetch(exp)
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'uploaded through a signed url')

    // A signature is bound to its path and operation.
    const other = new URL(down)
    other.searchParams.set('path', `${H}/t/hello.txt`)
    res = await fetch(other)
    assert.ok(res.status === 401 || res.status === 403, `download with another path's signature: ${res.status}`)
    res = await fetch(down, { method: 'POST', body: form })
    assert.ok(res.status === 401 || res.status === 403, `upload with a read signature: ${res.status}`)
    const tampered = new URL(down)
    tampered.searchParams.set('signature', 'v1_' + 'A'.repeat(43))
    res = await fetch(tampered)
    assert.ok(res.status === 401 || res.status === 403, `download with a bad signature: ${res.status}`)
    // An expired signature is refused.
    const expired = new URL(exp)
    const { getSignature } = await import('e2b')
    const sig = await getSignature({
      path: `${H}/signed/up.txt`, operation: 'read', user: undefined, expirationInSeconds: -10,
      envdAccessToken: sbx.envdAccessToken,
    })
    expired.searchParams.set('signature', sig.signature)
    expired.searchParams.set('signature_expiration', String(sig.expiration))
    res = await fetch(expired)
    assert.ok(res.status === 401 || res.status === 403, `download with an expired signature: ${res.status}`)
  })
})
