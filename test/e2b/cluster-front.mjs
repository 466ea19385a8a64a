// cluster-front.mjs drives the real e2b SDK for kube/clustertest's TestClusterFront (not a
// test file of this suite: that test runs it against moat serve --cluster). It reads
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY, does one step and prints JSON:
//
//   node cluster-front.mjs create N [TIMEOUT]  N sandboxes at once; each runs one command;
//                                              per sandbox its id, output and the ms from
//                                              its create to its first output
//   node cluster-front.mjs run ID CMD          CMD in sandbox ID (Sandbox.connect)
//   node cluster-front.mjs list                Sandbox.list()
//   node cluster-front.mjs kill ID...          Sandbox.kill(ID) for each
//   node cluster-front.mjs bench ID N          N runs of `true` in sandbox ID: each one's ms
//   node cluster-front.mjs preview ID          an HTTP server on port 8080 of sandbox ID, then
//                                              one request to it through E2B_SANDBOX_URL with
//                                              E2b-Sandbox-Port and the traffic token, one
//                                              without the token: their statuses and bodies
import { Sandbox } from 'e2b'

const [step, ...args] = process.argv.slice(2)

async function create(i, timeoutMs) {
  const t0 = performance.now()
  const sb = await Sandbox.create('base', { timeoutMs, metadata: { job: String(i) } })
  let first = 0
  const r = await sb.commands.run(`echo hello-${i}; cat /etc/hostname`, {
    onStdout: () => { if (!first) first = performance.now() },
  })
  return { id: sb.sandboxId, out: r.stdout, exit: r.exitCode, ms: Math.round((first || performance.now()) - t0) }
}

let out
switch (step) {
  case 'create': {
    const n = Number(args[0])
    const timeoutMs = args[1] ? Number(args[1]) * 1000 : 600_000
    out = await Promise.all(Array.from({ length: n }, (_, i) => create(i, timeoutMs)))
    break
  }
  case 'run': {
    const sb = await Sandbox.connect(args[0])
    const r = await sb.commands.run(args[1])
    out = { out: r.stdout, exit: r.exitCode }
    break
  }
  case 'list': {
    const p = Sandbox.list()
    out = []
    while (p.hasNext) out.push(...(await p.nextItems()))
    out = out.map((s) => ({ id: s.sandboxId, template: s.templateId, metadata: s.metadata, state: s.state }))
    break
  }
  case 'bench': {
    const sb = await Sandbox.connect(args[0])
    out = []
    for (let i = 0; i < Number(args[1]); i++) {
      const t0 = performance.now()
      await sb.commands.run('true')
      out.push(performance.now() - t0)
    }
    break
  }
  case 'preview': {
    const sb = await Sandbox.connect(args[0])
    await sb.files.write('/tmp/www/index.html', 'preview-of-' + args[0])
    // Detached (its own session), so that it outlives this script: the test reaches it again.
    await sb.commands.run('setsid python3 -m http.server 8080 --directory /tmp/www >/dev/null 2>&1 < /dev/null &')
    for (let i = 0; ; i++) {
      const r = await sb.commands.run('(exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null && echo up || true')
      if (r.stdout.includes('up')) break
      if (i > 100) throw new Error('port 8080 never opened')
      await new Promise((ok) => setTimeout(ok, 200))
    }
    const url = process.env.E2B_SANDBOX_URL + '/'
    const headers = { 'E2b-Sandbox-Id': args[0], 'E2b-Sandbox-Port': '8080' }
    const ask = async (h) => { const r = await fetch(url, { headers: h }); return { status: r.status, body: await r.text() } }
    out = {
      token: sb.trafficAccessToken ?? '',
      host: sb.getHost(8080),
      with: await ask({ ...headers, 'E2b-Traffic-Access-Token': sb.trafficAccessToken ?? '' }),
      without: await ask(headers),
    }
    break
  }
  case 'kill':
    out = await Promise.all(args.map((id) => Sandbox.kill(id)))
    break
  default:
    throw new Error(`unknown step ${step}`)
}
console.log(JSON.stringify(out))
