// moat's web console: one vanilla ES module. Everything it shows comes from the same /v1
// API the CLI uses (fetch with the session cookie; state-changing calls carry the
// session's CSRF token in X-CSRF-Token). Every text that comes from the daemon or a
// sandbox enters the page through el() below, as text nodes and attribute values, never
// as HTML: a file named <img src=x onerror=alert(1)> shows as those characters.

const main = document.getElementById('main');
let csrf = '';
let cleanups = [];

// el builds an element: props are attributes (on* are listeners), kids are nodes or text.
function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat()) {
    if (k != null) e.append(k instanceof Node ? k : String(k));
  }
  return e;
}

// sandboxLink is the console's own URL of a sandbox tab (ids are escaped).
const sandboxLink = (id, tab) => '#/sandbox/' + encodeURIComponent(id) + (tab ? '/' + tab : '');

class APIError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

// api calls the daemon's API as the signed-in session.
async function api(method, path, body, extraHeaders) {
  const headers = Object.assign({}, extraHeaders);
  if (method !== 'GET' && method !== 'HEAD') headers['X-CSRF-Token'] = csrf;
  let payload = body;
  if (body !== undefined && !(body instanceof Blob) && typeof body !== 'string') {
    headers['Content-Type'] = 'application/json';
    payload = JSON.stringify(body);
  }
  const r = await fetch(path, { method, headers, body: payload, credentials: 'same-origin' });
  if (r.status === 401) {
    location.assign('/ui/login');
    throw new APIError(401, 'unauthenticated', 'signed out');
  }
  if (!r.ok) {
    let code = '', msg = r.statusText;
    try { const e = await r.json(); code = e.code || ''; msg = e.message || msg; } catch (_) { /* not JSON */ }
    throw new APIError(r.status, code, msg);
  }
  if (r.status === 204) return null;
  return (r.headers.get('Content-Type') || '').includes('json') ? r.json() : r;
}

// rpc calls an envd Connect RPC of a sandbox (JSON codec) through the daemon.
const rpc = (id, method, req) => api('POST', `/v1/sandboxes/${encodeURIComponent(id)}/envd/${method}`, req,
  { 'Connect-Protocol-Version': '1' });

function errorBox(err) {
  return el('p', { class: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err));
}

function ago(t) {
  if (!t) return '—';
  const s = Math.round((Date.now() - new Date(t).getTime()) / 1000);
  if (s < 0) return 'in ' + dur(-s);
  return dur(s) + ' ago';
}

function dur(s) {
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm';
  if (s < 86400) return Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0');
  return Math.floor(s / 86400) + 'd';
}

function until(t) {
  if (!t) return 'never';
  const s = Math.round((new Date(t).getTime() - Date.now()) / 1000);
  return s <= 0 ? 'expired' : 'in ' + dur(s);
}

const ownerOf = sb => sb.owner_name || sb.owner || '(operator)';

// table makes a table of rows with columns [title, cell(row)]; a cell is text or nodes.
function table(cols, rows, id) {
  return el('table', { id },
    el('thead', null, el('tr', null, cols.map(c => el('th', null, c[0])))),
    el('tbody', null, rows.map(r => el('tr', null, cols.map(c => el('td', { class: c[2] }, c[1](r)))))));
}

function every(ms, fn) {
  const t = setInterval(fn, ms);
  cleanups.push(() => clearInterval(t));
}

// ---- sandboxes list ----

async function listPage() {
  const createBox = el('div');
  const listBox = el('div', null, el('p', { class: 'muted' }, 'Loading…'));
  main.replaceChildren(el('h1', null, 'Sandboxes'), createBox, listBox);
  createBox.append(await createForm());
  const refresh = async () => {
    try {
      const list = await api('GET', '/v1/sandboxes');
      listBox.replaceChildren(list.length === 0 ? el('p', { class: 'muted' }, 'No sandboxes yet.') : table([
        ['Sandbox', sb => el('a', { href: sandboxLink(sb.id), class: 'mono' }, sb.name ? `${sb.name} (${sb.id})` : sb.id)],
        ['State', sb => el('span', { class: 'state-' + sb.state }, sb.state)],
        ['Runtime', sb => sb.runtime],
        ['Template', sb => sb.template],
        ['Age', sb => ago(sb.created_at)],
        ['Expires', sb => until(sb.expires_at)],
        ['Owner', ownerOf],
        ['Visibility', sb => sb.visibility || 'private'],
        ['', sb => actions(sb, refresh)],
      ], list, 'sandboxes'));
    } catch (e) {
      listBox.replaceChildren(errorBox(e));
    }
  };
  await refresh();
  every(5000, refresh);
}

// actions are a sandbox's stop/start/delete buttons; done runs after each.
function actions(sb, done) {
  const out = el('span', { class: 'toolbar' });
  const act = (label, method, path, cls) => el('button', {
    type: 'button', class: cls, 'data-action': label.toLowerCase(), onclick: async ev => {
      ev.target.disabled = true;
      try { await api(method, path); } catch (e) { out.append(errorBox(e)); }
      await done();
    },
  }, label);
  const base = '/v1/sandboxes/' + encodeURIComponent(sb.id);
  if (sb.state === 'running') out.append(act('Stop', 'POST', base + '/stop'));
  if (sb.state === 'stopped' || sb.state === 'paused') out.append(act('Start', 'POST', base + '/start'));
  // Delete asks once more on the button itself (no dialog).
  const del = el('button', { type: 'button', class: 'danger', 'data-action': 'delete' }, 'Delete');
  del.addEventListener('click', async () => {
    if (!del.dataset.armed) { del.dataset.armed = '1'; del.textContent = 'Really delete?'; return; }
    del.disabled = true;
    try { await api('DELETE', base); } catch (e) { out.append(errorBox(e)); }
    await done();
  });
  out.append(del);
  return out;
}

async function createForm() {
  let templates = [];
  try { templates = await api('GET', '/v1/templates'); } catch (_) { /* shown as a free field */ }
  const f = el('form', { class: 'create', id: 'create' },
    el('label', null, 'Name (optional)', el('input', { name: 'name', placeholder: 'my-agent' })),
    el('label', null, 'Template', templates.length
      ? el('select', { name: 'template' }, el('option', { value: '' }, '(default)'), templates.map(t => el('option', { value: t.name }, t.name)))
      : el('input', { name: 'template', placeholder: '(default)' })),
    el('label', null, 'Runtime', el('select', { name: 'runtime' }, ['', 'runc', 'runsc'].map(r => el('option', { value: r }, r || '(default)')))),
    el('label', null, 'Memory (MiB)', el('input', { name: 'memory', type: 'number', min: 16, placeholder: 'default' })),
    el('label', null, 'CPUs', el('input', { name: 'cpus', type: 'number', min: 0.1, step: 0.1, placeholder: 'default' })),
    el('label', null, 'Visibility', el('select', { name: 'visibility' }, el('option', { value: 'private' }, 'private (owner only)'), el('option', { value: 'team' }, 'team (every key)'))),
    el('label', null, 'Egress allow rules (one a line; none: no network)', el('textarea', { name: 'allow', placeholder: 'pypi.org\n*.github.com:443' })),
    el('div', null, el('button', { type: 'submit', class: 'primary' }, 'Create sandbox')));
  const status = el('div');
  f.addEventListener('submit', async ev => {
    ev.preventDefault();
    const d = new FormData(f);
    const req = { template: d.get('template') || undefined, runtime: d.get('runtime') || undefined, name: d.get('name') || undefined };
    if (d.get('memory')) req.memory_bytes = Math.round(Number(d.get('memory')) * 1048576);
    if (d.get('cpus')) req.cpus = Number(d.get('cpus'));
    if (d.get('visibility') === 'team') req.visibility = 'team';
    const allow = String(d.get('allow') || '').split('\n').map(s => s.trim()).filter(Boolean);
    if (allow.length) req.policy = { phases: { run: { allow } }, phase: 'run' };
    status.replaceChildren(el('p', { class: 'muted' }, 'Creating…'));
    f.querySelector('button[type=submit]').disabled = true;
    try {
      const sb = await api('POST', '/v1/sandboxes', req);
      location.hash = sandboxLink(sb.id, 'terminal');
    } catch (e) {
      status.replaceChildren(errorBox(e));
      f.querySelector('button[type=submit]').disabled = false;
    }
  });
  return el('div', null, f, status);
}

// ---- one sandbox ----

const tabs = ['overview', 'terminal', 'files', 'egress', 'policy', 'ports', 'events', 'snapshots', 'changes'];

async function detailPage(id, tab) {
  let sb;
  try {
    sb = await api('GET', '/v1/sandboxes/' + encodeURIComponent(id));
  } catch (e) {
    main.replaceChildren(el('h1', null, 'Sandbox'), el('p', { class: 'error', id: 'notfound', role: 'alert' },
      e.status === 404 ? `No sandbox ${id} that this API key may see.` : e.message), el('a', { href: '#/' }, '← all sandboxes'));
    return;
  }
  if (!tabs.includes(tab)) tab = 'overview';
  const box = el('section', { id: 'tab-' + tab });
  main.replaceChildren(
    el('p', null, el('a', { href: '#/' }, '← all sandboxes')),
    el('h1', null, el('span', { class: 'mono' }, sb.name ? `${sb.name} (${sb.id})` : sb.id), ' ',
      el('span', { class: 'state-' + sb.state }, sb.state)),
    actions(sb, () => route()),
    el('nav', { class: 'tabs' }, tabs.map(t => el('a', { href: sandboxLink(sb.id, t), class: t === tab ? 'active' : null }, t))),
    box);
  try {
    await ({ overview, terminal: terminalTab, files: filesTab, egress: egressTab, policy: policyTab, ports: portsTab, events: eventsTab, snapshots: snapshotsTab, changes: changesTab })[tab](sb, box);
  } catch (e) {
    box.append(errorBox(e));
  }
}

function overview(sb, box) {
  const kv = (k, v) => [el('dt', null, k), el('dd', { class: 'mono' }, v == null || v === '' ? '—' : v)];
  const l = sb.limits || {};
  box.append(el('dl', { class: 'kv' },
    kv('ID', sb.id), kv('Name', sb.name), kv('State', sb.state), kv('Error', sb.error), kv('Runtime', sb.runtime),
    kv('Template', sb.template), kv('Created', sb.created_at ? `${sb.created_at} (${ago(sb.created_at)})` : ''),
    kv('Expires', until(sb.expires_at)), kv('Owner', ownerOf(sb)), kv('Visibility', sb.visibility || 'private'),
    kv('Memory', l.memory_bytes ? Math.round(l.memory_bytes / 1048576) + ' MiB' : ''), kv('CPUs', l.cpus),
    kv('Phase', sb.policy && sb.policy.phase), kv('Snapshot', sb.snapshot), kv('Fork of', sb.fork_of)));
  // Visibility: who else may use the sandbox (PUT /v1/sandboxes/{id}/visibility).
  const other = (sb.visibility || 'private') === 'private' ? 'team' : 'private';
  const status = el('span');
  box.append(el('p', { class: 'toolbar' }, el('button', {
    type: 'button', id: 'visibility', onclick: async () => {
      try {
        await api('PUT', `/v1/sandboxes/${encodeURIComponent(sb.id)}/visibility`, { visibility: other });
        route();
      } catch (e) { status.replaceChildren(errorBox(e)); }
    },
  }, other === 'team' ? 'Share with the team (visibility: team)' : 'Make private (owner only)'), status));
}

async function terminalTab(sb, box) {
  if (sb.state !== 'running') {
    box.append(el('p', { class: 'muted' }, `The sandbox is ${sb.state}: start it for a terminal.`));
    return;
  }
  let mod;
  try {
    mod = await import('/ui/dist/term.js');
  } catch (_) {
    box.append(el('p', { class: 'error', id: 'no-bundle' }, 'The terminal bundle was not built: run `make build` (it bundles xterm.js with npm and esbuild) and restart moat serve.'));
    return;
  }
  if (!document.getElementById('xterm-css')) document.head.append(el('link', { id: 'xterm-css', rel: 'stylesheet', href: '/ui/dist/xterm.css' }));
  const div = el('div', { id: 'terminal' });
  box.append(div);
  const term = new mod.Terminal({ cursorBlink: true, fontSize: 13, scrollback: 2000 });
  const fit = new mod.FitAddon();
  term.loadAddon(fit);
  term.open(div);
  fit.fit();
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const ws = new WebSocket(`${proto}//${location.host}/v1/sandboxes/${encodeURIComponent(sb.id)}/terminal?cols=${term.cols}&rows=${term.rows}`);
  ws.binaryType = 'arraybuffer';
  ws.onmessage = ev => term.write(new Uint8Array(ev.data));
  // The close reason is the daemon's text; control characters are dropped before the
  // terminal (which renders escapes) shows it.
  ws.onclose = ev => term.write(`\r\n[terminal closed${ev.reason ? ': ' + ev.reason.replace(/[\x00-\x1f\x7f-\x9f]/g, '') : ''}]\r\n`);
  const enc = new TextEncoder();
  term.onData(d => { if (ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d)); });
  term.onResize(({ cols, rows }) => { if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ cols, rows })); });
  const onResize = () => fit.fit();
  window.addEventListener('resize', onResize);
  term.focus();
  cleanups.push(() => { window.removeEventListener('resize', onResize); ws.close(); term.dispose(); });
}

async function filesTab(sb, box) {
  const pathIn = el('input', { id: 'path', value: '~', size: 40 });
  const listBox = el('div');
  const upload = el('input', { type: 'file', id: 'upload' });
  const show = async () => {
    try {
      const r = await rpc(sb.id, 'filesystem.Filesystem/ListDir', { path: pathIn.value, depth: 1 });
      const entries = (r.entries || []).sort((a, b) => a.name.localeCompare(b.name));
      listBox.replaceChildren(table([
        ['Name', e => e.type === 'FILE_TYPE_DIRECTORY'
          ? el('a', { href: '#', class: 'mono', onclick: ev => { ev.preventDefault(); pathIn.value = e.path; show(); } }, e.name + '/')
          : el('span', { class: 'mono file-name' }, e.name)],
        ['Size', e => e.type === 'FILE_TYPE_DIRECTORY' ? '' : String(e.size || 0)],
        ['Mode', e => e.permissions || ''],
        ['Owner', e => e.owner || ''],
        ['', e => e.type === 'FILE_TYPE_FILE' ? el('button', { type: 'button', onclick: () => download(sb.id, e) }, 'Download') : ''],
      ], entries, 'files'));
    } catch (e) {
      listBox.replaceChildren(errorBox(e));
    }
  };
  const up = async () => {
    for (const file of upload.files) {
      const dir = pathIn.value.replace(/\/+$/, '');
      try {
        await api('POST', `/v1/sandboxes/${encodeURIComponent(sb.id)}/envd/files?path=${encodeURIComponent(dir + '/' + file.name)}`, file,
          { 'Content-Type': 'application/octet-stream' });
      } catch (e) { listBox.prepend(errorBox(e)); }
    }
    show();
  };
  box.append(el('div', { class: 'toolbar' }, 'Directory', pathIn, el('button', { type: 'button', onclick: show }, 'List'),
    el('button', { type: 'button', onclick: () => { pathIn.value = pathIn.value.replace(/\/[^/]*\/?$/, '') || '/'; show(); } }, 'Up'),
    '  Upload here:', upload, el('button', { type: 'button', id: 'files-upload', onclick: up }, 'Upload')), listBox);
  pathIn.addEventListener('keydown', ev => { if (ev.key === 'Enter') show(); });
  await show();
}

// download saves a sandbox file through a blob: the browser never navigates to the
// sandbox's bytes.
async function download(id, entry) {
  const r = await api('GET', `/v1/sandboxes/${encodeURIComponent(id)}/envd/files?path=${encodeURIComponent(entry.path)}`);
  const blob = new Blob([await r.arrayBuffer()], { type: 'application/octet-stream' });
  const url = URL.createObjectURL(blob);
  const a = el('a', { href: url, download: entry.name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

async function egressTab(sb, box) {
  let after = 0;
  const tbody = el('tbody');
  box.append(el('p', { class: 'muted' }, 'Live: new decisions appear as the sandbox connects.'),
    el('table', { id: 'egress' }, el('thead', null, el('tr', null, ['Time', 'Decision', 'Proto', 'Destination', 'Rule / reason', 'User'].map(h => el('th', null, h)))), tbody));
  const poll = async () => {
    const list = await api('GET', `/v1/sandboxes/${encodeURIComponent(sb.id)}/egress?after=${after}`);
    for (const e of list) {
      after = Math.max(after, e.seq);
      const dest = (e.name || e.addr || '') + (e.port ? ':' + e.port : '');
      tbody.prepend(el('tr', { 'data-seq': e.seq },
        el('td', null, new Date(e.time).toLocaleTimeString()),
        el('td', { class: e.allowed ? 'allowed' : 'blocked' }, e.allowed ? 'allowed' : 'blocked'),
        el('td', null, e.proto), el('td', { class: 'mono' }, dest),
        el('td', { class: 'mono' }, [e.rule, e.reason, e.error].filter(Boolean).join(' · ')), el('td', null, e.user || '')));
    }
  };
  await poll();
  every(1500, () => poll().catch(() => {}));
}

async function policyTab(sb, box) {
  const p = sb.policy || { phases: {} };
  box.append(el('p', null, 'Current phase: ', el('strong', { id: 'phase' }, p.phase || '—')));
  for (const [name, r] of Object.entries(p.phases || {})) {
    const lines = [];
    if (r.net) lines.push('net: ' + r.net);
    for (const k of ['allow', 'deny', 'http', 'ask']) for (const v of r[k] || []) lines.push(k + ' ' + v);
    box.append(el('h2', null, 'Phase ', name, name === p.phase ? ' (current)' : ''),
      el('pre', { class: 'mono' }, lines.length ? lines.join('\n') : '(no rules: nothing allowed)'),
      name === p.phase ? '' : el('button', {
        type: 'button', onclick: async () => {
          try { await api('PUT', `/v1/sandboxes/${encodeURIComponent(sb.id)}/policy`, { phase: name }); route(); } catch (e) { box.append(errorBox(e)); }
        },
      }, 'Switch to ' + name));
  }
}

async function portsTab(sb, box) {
  const base = `/v1/sandboxes/${encodeURIComponent(sb.id)}/ports`;
  let ports;
  try {
    ports = await api('GET', base);
  } catch (e) {
    if (e.status === 404) { box.append(el('p', { class: 'muted', id: 'no-ports' }, 'Port previews are not available on this daemon.')); return; }
    throw e;
  }
  const portIn = el('input', { type: 'number', min: 1, max: 65535, id: 'port', placeholder: '8000' });
  const vis = el('select', { id: 'port-visibility' }, ['private', 'token', 'public'].map(v => el('option', { value: v }, v)));
  box.append(el('div', { class: 'toolbar' }, 'Open port', portIn, vis, el('button', {
    type: 'button', id: 'open-port', onclick: async () => {
      try { await api('PUT', `${base}/${Number(portIn.value)}`, { visibility: vis.value }); route(); } catch (e) { box.append(errorBox(e)); }
    },
  }, 'Open')));
  const link = p => {
    // The daemon's path-based URL, used only when it is one (a relative /preview/ path).
    const href = typeof p.path_url === 'string' && p.path_url.startsWith('/preview/') ? p.path_url
      : `/preview/${encodeURIComponent(sb.id)}/${Number(p.port)}/`;
    return el('a', { href, target: '_blank', rel: 'noopener noreferrer', class: 'preview', 'data-port': p.port }, 'open preview');
  };
  box.append(ports.length === 0 ? el('p', { class: 'muted' }, 'No ports open.') : table([
    ['Port', p => String(p.port)], ['Listening', p => p.listening ? 'yes' : 'no'], ['Visibility', p => p.visibility],
    ['Preview', link], ['Host URL', p => p.url || '—'],
    ['', p => el('button', {
      type: 'button', class: 'danger', onclick: async () => {
        try { await api('DELETE', `${base}/${Number(p.port)}`); route(); } catch (e) { box.append(errorBox(e)); }
      },
    }, 'Close')],
  ], ports, 'ports'));
}

async function eventsTab(sb, box) {
  const evs = await api('GET', `/v1/sandboxes/${encodeURIComponent(sb.id)}/events`);
  box.append(table([['Time', e => new Date(e.time).toLocaleString()], ['Kind', e => e.kind], ['Detail', e => e.detail, 'mono']], evs.slice().reverse(), 'events'));
}

async function snapshotsTab(sb, box) {
  let list;
  try { list = await api('GET', '/v1/snapshots'); } catch (e) { box.append(errorBox(e)); return; }
  list = list.filter(s => s.sandbox === sb.id);
  box.append(el('p', { class: 'muted' }, 'Snapshots of this sandbox (take one with `moat snapshot`; fork with `moat fork`).'),
    list.length === 0 ? el('p', { class: 'muted' }, 'None.') : snapTable(list));
}

function snapTable(list) {
  return table([['Snapshot', s => s.name ? `${s.name} (${s.id})` : s.id, 'mono'], ['Sandbox', s => el('a', { href: sandboxLink(s.sandbox) }, s.sandbox)],
    ['Template', s => s.template], ['Created', s => ago(s.created_at)], ['Size', s => Math.round((s.size_bytes || 0) / 1048576) + ' MiB'], ['Method', s => s.method]], list, 'snapshots');
}

async function changesTab(sb, box) {
  let list;
  try { list = await api('GET', `/v1/sandboxes/${encodeURIComponent(sb.id)}/changes`); } catch (e) { box.append(errorBox(e)); return; }
  box.append(el('p', { class: 'muted' }, 'Git pushes of this sandbox and their decisions (held ones wait for approve or deny).'),
    list.length === 0 ? el('p', { class: 'muted' }, 'None.') : table([
      ['Change', c => c.id, 'mono'], ['Time', c => ago(c.time)], ['Remote', c => c.remote || '', 'mono'],
      ['Refs', c => (c.refs || []).map(r => r.ref || r.name || '').join(', '), 'mono'], ['Decision', c => c.decision],
      ['Reasons', c => (c.reasons || []).join('; ')],
      ['', c => c.decision === 'held' ? decide(`/v1/sandboxes/${encodeURIComponent(sb.id)}/changes/${encodeURIComponent(c.id)}`, () => route()) : '']], list, 'changes'));
}

// decide is an approve/deny pair for a pending decision at base (…/approve, …/deny); the
// daemon says whether this key may decide (approver keys, owners for changes).
function decide(base, done) {
  const out = el('span', { class: 'toolbar' });
  for (const [label, verb, cls] of [['Approve', 'approve', 'primary'], ['Deny', 'deny', 'danger']]) {
    out.append(el('button', {
      type: 'button', class: cls, 'data-action': verb, onclick: async ev => {
        ev.target.disabled = true;
        try { await api('POST', `${base}/${verb}`, {}); await done(); } catch (e) { out.append(errorBox(e)); ev.target.disabled = false; }
      },
    }, label));
  }
  return out;
}

// ---- daemon-wide pages ----

async function approvalsPage() {
  main.replaceChildren(el('h1', null, 'Approvals'));
  try {
    const list = await api('GET', '/v1/approvals');
    main.append(list.length === 0 ? el('p', { class: 'muted' }, 'None.') : table([
      ['Approval', a => a.id, 'mono'], ['Sandbox', a => el('a', { href: sandboxLink(a.sandbox) }, a.sandbox)], ['Kind', a => a.kind],
      ['Summary', a => a.summary || '', 'mono'], ['State', a => a.state], ['Asked', a => ago(a.created_at)], ['Deadline', a => until(a.deadline)],
      ['', a => a.state === 'pending' ? decide('/v1/approvals/' + encodeURIComponent(a.id), approvalsPage) : '']], list, 'approvals'));
  } catch (e) {
    main.append(errorBox(e));
  }
}

async function snapshotsPage() {
  main.replaceChildren(el('h1', null, 'Snapshots'));
  try {
    const list = await api('GET', '/v1/snapshots');
    main.append(list.length === 0 ? el('p', { class: 'muted' }, 'None.') : snapTable(list));
  } catch (e) {
    main.append(errorBox(e));
  }
}

// ---- routing ----

async function route() {
  for (const c of cleanups) c();
  cleanups = [];
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  if (parts[0] === 'sandbox' && parts[1]) return detailPage(parts[1], parts[2] || 'overview');
  if (parts[0] === 'approvals') return approvalsPage();
  if (parts[0] === 'snapshots') return snapshotsPage();
  return listPage();
}

async function start() {
  const r = await fetch('/ui/session', { credentials: 'same-origin' });
  if (!r.ok) { location.assign('/ui/login'); return; }
  const s = await r.json();
  csrf = s.csrf_token;
  document.getElementById('who').textContent = (s.owner ? s.owner + ' · ' : '') + s.api_key + (s.admin ? ' (admin)' : '');
  document.getElementById('logout').addEventListener('click', async () => {
    try { await api('POST', '/ui/logout'); } catch (_) { /* signed out either way */ }
    location.assign('/ui/login');
  });
  window.addEventListener('hashchange', route);
  route();
}

start();
