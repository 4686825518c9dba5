// vak admin: the #/prompts page and its siblings. Vanilla JS, no build step,
// no request to anything but this server's own /api/.
//
// Copy rule (doc 45): visible text says guardrails "instruct" the model.
// A test scans every string literal in this file for the words it must
// avoid, so keep user-facing text in string literals, never in identifiers.
'use strict';

const TOKEN_KEY = 'vak-admin-token';
const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  scope: 'project',
  sub: 'base',
  roles: [],
  layer: null,
  openEditor: null,
};

const $ = (sel) => document.querySelector(sel);
// Built from strings so this file has no regular-expression literals (the
// copy test reads string literals with a small tokenizer).
const UNSAFE_ID = new RegExp('[^a-z0-9-]', 'gi');
const HASH_PREFIX = new RegExp('^#/');

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const fmt = (n) => (typeof n === 'number' ? n.toLocaleString('en-US') : '?');

function say(text) {
  $('#status').textContent = text;
}

// ---- API ----------------------------------------------------------------

async function api(method, path, body) {
  const init = { method, headers: { Authorization: 'Bearer ' + state.token } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    return { status: 0, ok: false, data: { error: 'The admin server did not answer; is `vak admin serve` still running?' } };
  }
  let data;
  try {
    data = await res.json();
  } catch (err) {
    data = { error: 'The server answered ' + res.status + ' without a JSON body.' };
  }
  if (res.status === 401) showLogin(data.error);
  return { status: res.status, ok: res.ok, data };
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const s = q.toString();
  return s ? '?' + s : '';
}

// The layer under edit, as query parameters.
function layerParams() {
  const p = { scope: state.scope };
  if (state.sub.startsWith('surface/')) p.surface = state.sub.slice(8);
  if (state.sub.startsWith('agents/')) p.agent = state.sub.slice(7);
  if (state.sub.startsWith('dir/')) p.dir = state.sub.slice(4);
  return p;
}

// The chain the effective prompt is shown for: the edited layer's surface
// and role selected.
function viewParams() {
  const p = layerParams();
  return { surface: p.surface, agent: p.agent, dir: p.dir };
}

// ---- routing ------------------------------------------------------------

const VIEWS = ['login', 'prompts', 'permissions', 'gateway', 'audit'];

function show(view) {
  for (const v of VIEWS) $('#view-' + v).hidden = v !== view;
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.view === view) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  $('#logout').hidden = view === 'login';
}

function showLogin(message) {
  show('login');
  $('#login-error').textContent = message && state.token ? message : '';
  $('#token-input').focus();
}

async function route() {
  if (!state.token) return showLogin();
  const view = (location.hash.replace(HASH_PREFIX, '') || 'prompts').split('?')[0];
  if (view === 'permissions') {
    show('permissions');
    return loadPermissions();
  }
  if (view === 'gateway') {
    show('gateway');
    return loadGateway();
  }
  if (view === 'audit') {
    show('audit');
    return loadAudit();
  }
  show('prompts');
  loadRules();
  return loadPrompts();
}

// ---- #/prompts ----------------------------------------------------------

function renderScope() {
  for (const b of document.querySelectorAll('.scope button')) {
    b.setAttribute('aria-pressed', String(b.dataset.scope === state.scope));
  }
  const select = $('#sub-select');
  select.replaceChildren();
  select.append(el('option', { value: 'base', text: 'Base layer' }));
  const surfaces = (state.layer && state.layer.surfaces) || ['cli', 'desktop', 'server', 'chat', 'background'];
  for (const s of surfaces) select.append(el('option', { value: 'surface/' + s, text: 'Surface: ' + s }));
  const roles = new Set(state.roles);
  if (state.sub.startsWith('agents/')) roles.add(state.sub.slice(7));
  for (const r of [...roles].sort()) select.append(el('option', { value: 'agents/' + r, text: 'Agent: ' + r }));
  // Directory layers of a monorepo: each directory below the project root
  // with its own .vak/prompts/ or AGENTS.md (project scope only).
  if (state.scope === 'project') {
    const dirs = new Set((state.layer && state.layer.directories) || []);
    if (state.sub.startsWith('dir/')) dirs.add(state.sub.slice(4));
    for (const d of [...dirs].sort()) select.append(el('option', { value: 'dir/' + d, text: 'Directory: ' + d }));
  }
  select.value = state.sub;
}

async function loadPrompts() {
  // All three at once, and rendered in one turn: a caller that moves the
  // focus after this (a save's re-render) never runs before the view is whole.
  const [layer, prompt, managed] = await Promise.all([
    api('GET', '/api/layers' + query(layerParams())),
    api('GET', '/api/prompt' + query(viewParams())),
    api('GET', '/api/managed'),
  ]);
  if (layer.status === 401 || prompt.status === 401) return;
  if (!layer.ok) {
    renderScope();
    $('#cards').replaceChildren(el('p', { class: 'error', role: 'alert', text: layer.data.error }));
  } else {
    state.layer = layer.data;
    state.roles = layer.data.roles || [];
    renderScope();
    renderLayer(layer.data);
  }
  if (prompt.ok) renderEffective(prompt.data);
  else $('#effective').replaceChildren(el('li', { class: 'error', text: prompt.data.error }));
  if (managed.ok) renderManaged(managed.data);
}

// The managed layer: the machine administrator's floor, shown read-only
// (no editor, no reset: vak never writes it).
function renderManaged(m) {
  const box = $('#managed');
  box.hidden = !m.present;
  if (!m.present) return box.replaceChildren();
  const head = el('h2', { id: 'managed-title' }, 'Managed layer ', el('span', { class: 'badge', text: 'managed' }), ' ', el('span', { class: 'small', text: 'read-only' }));
  const where = el('p', { class: 'hint' }, 'Set by this machine\'s administrator in ', el('code', { text: (m.dir || '') + '/' }), '; vak never writes it.');
  if (m.refused) {
    return box.replaceChildren(head, where, el('p', { class: 'error', role: 'alert', text: 'Refused, so no prompt resolves until it is fixed: ' + m.refused }));
  }
  const facts = el('ul', { class: 'small' });
  facts.append(el('li', { text: 'Locked: ' + (m.locked.length ? m.locked.join(', ') + ' (narrower layers\' text for these is not applied)' : 'nothing') }));
  if (m.max_tokens) facts.append(el('li', { text: 'Token cap ceiling: ' + fmt(m.max_tokens) }));
  facts.append(el('li', { text: m.keys.length ? 'Signed: every file needs a signature by ' + m.keys.join(', ') : 'Not signed' }));
  const files = el('ul', { class: 'managed-files' });
  for (const f of m.files) {
    files.append(el('li', { 'data-name': f.block },
      el('details', {},
        el('summary', {}, el('strong', { text: f.block + (f.surface ? ' (surface ' + f.surface + ')' : '') }), f.locked ? ' locked ' : ' ', el('code', { text: f.path || '' })),
        f.signed_by ? el('p', { class: 'small', text: 'signed by ' + f.signed_by }) : '',
        el('pre', { class: 'content', text: f.text }))));
  }
  box.replaceChildren(head, where, facts, files);
}

function renderLayer(layer) {
  const scopeLabel = layer.scope === 'shared' ? 'Shared' : 'This project';
  const sub = layer.sub === 'base' ? '' : ' · ' + layer.sub;
  $('#editing').replaceChildren('Editing: ', el('strong', { text: scopeLabel + sub }), ' · ', el('code', { text: layer.dir + '/' }));
  const note = $('#trust-note');
  if (layer.scope === 'project' && layer.trust === 'untrusted') {
    note.hidden = false;
    const preview = el('div', { class: 'trust-preview' });
    note.replaceChildren('This project is untrusted: only its guardrails apply. Identity, operating rules and surface notes saved here are kept on disk but not used until you run `vak trust` on the project. ',
      el('button', { type: 'button', class: 'preview-trust', onclick: () => showTrustPreview(preview) }, 'Preview trusting it'),
      preview);
  } else {
    note.hidden = true;
  }
  const cards = $('#cards');
  cards.replaceChildren(...layer.blocks.map((b) => card(layerTarget(b), b)));
}

function layerTarget(b) {
  return { kind: 'layer', params: layerParams(), name: b.block, where: b.path };
}

const STATE_HELP = {
  inherited: 'No file here: this layer inherits.',
  overridden: 'This layer has its own text.',
  empty: 'This layer says deliberately nothing.',
  unreadable: 'This layer has a file vak refuses to read; remove it (`vak prompts reset`) to inherit again.',
};

function inheritsFrom(b) {
  if (!b.effective) return '';
  if (b.composition === 'accumulate') return 'Adds to wider layers; nothing a wider layer said is removed.';
  if (b.lands_in === 'agent-instructions') return 'At an agent layer this text is added as agent instructions after the universal identity; it never replaces it.';
  if (b.state === 'inherited') return 'Inherits: ' + b.effective.summary + '.';
  return 'In effect: ' + b.effective.summary + '.';
}

function isGuardrail(name) {
  return name === 'guardrails';
}

function guardrailNote() {
  return el('p', { class: 'guard-note' },
    'Guardrails instruct the model. They are defence in depth, not a sandbox: a model may misread or ignore them. What tools may do is decided by ',
    el('a', { href: '#/permissions' }, 'Permissions'),
    ' before anything runs.');
}

// One editable block of one layer or gateway entry.
function card(target, b) {
  const id = (target.kind + '-' + (target.bot || '') + '-' + (target.chat || '') + '-' + b.block).replace(UNSAFE_ID, '_');
  const badge = el('span', { class: 'badge badge-' + b.state, title: STATE_HELP[b.state] }, b.state);
  const actions = el('div', { class: 'actions' });
  const source = el('div', { class: 'source', hidden: true });
  const editor = el('div', { class: 'editor', hidden: true });
  const result = el('div', { class: 'result', role: 'alert', tabindex: '-1', 'data-card': id });
  const node = el('article', { class: 'card', id: 'card-' + id, 'data-name': b.block, 'data-state': b.state },
    el('header', {}, el('h3', { text: b.label }), badge),
    el('p', { class: 'meta' }, el('code', { text: target.where }), ' ', b.effective ? inheritsFrom(b) : ''),
    b.not_applied ? el('p', { class: 'note small', text: b.not_applied }) : null,
    b.problem ? el('p', { class: 'error small', text: b.problem }) : null,
    actions, source, editor, result);

  const overrideBtn = el('button', { type: 'button', class: 'override', onclick: () => openEditor() },
    b.state === 'inherited' ? 'Override' : 'Edit');
  const sourceBtn = el('button', { type: 'button', class: 'view-source', 'aria-expanded': 'false', onclick: () => toggleSource() }, 'View source');
  const resetBtn = el('button', { type: 'button', class: 'reset', disabled: b.state === 'inherited', onclick: () => confirmReset() }, 'Reset');
  actions.append(overrideBtn, sourceBtn, resetBtn);
  const history = el('div', { class: 'history', hidden: true });
  // A layer file's history is /api/history/<block>?scope=…; a gateway
  // key's is under its own URL (/api/gateway/…/<block>/history).
  const gatewayKey = target.kind === 'bot' || target.kind === 'chat';
  const historyUrl = (suffix, params) => gatewayKey
    ? targetUrl(target, b.block) + '/history' + suffix + query(params || {})
    : '/api/history/' + b.block + suffix + query({ ...(target.params || {}), ...(params || {}) });
  const noun = gatewayKey ? 'key' : 'layer';
  {
    const historyBtn = el('button', { type: 'button', class: 'view-history', 'aria-expanded': 'false', onclick: () => toggleHistory(historyBtn) }, 'History');
    actions.append(historyBtn);
    node.insertBefore(history, result);
  }

  async function toggleHistory(btn) {
    const open = history.hidden;
    history.hidden = !open;
    btn.setAttribute('aria-expanded', String(open));
    if (!open) return;
    history.replaceChildren(el('p', { class: 'small', text: 'Loading versions\u2026' }));
    const r = await api('GET', historyUrl(''));
    if (!r.ok) {
      history.replaceChildren(el('p', { class: 'error small', text: r.data.error }));
      return;
    }
    renderHistory(r.data);
  }

  function renderHistory(h) {
    history.replaceChildren();
    const absent = gatewayKey ? '(no key)' : '(no file)';
    if (!h.versions.length) {
      history.append(el('p', { class: 'small', text: 'No versions recorded: this ' + noun + ' was never changed through vak.' }));
      return;
    }
    const choices = [];
    const seen = new Set();
    const addChoice = (d, label) => {
      const key = d || '';
      if (seen.has(key)) return;
      seen.add(key);
      choices.push({ digest: key, label });
    };
    for (const v of h.versions) {
      addChoice(v.before, v.before ? v.before.slice(0, 12) : absent);
      addChoice(v.after, v.after ? v.after.slice(0, 12) : absent);
    }
    const table = el('table', { class: 'versions' },
      el('thead', {}, el('tr', {}, el('th', { text: 'When' }), el('th', { text: 'Change' }), el('th', { text: 'Who' }), el('th', { text: 'Digest' }), el('th', { text: 'Tokens' }), el('th', { text: '' }))));
    const body = el('tbody');
    for (const v of [...h.versions].reverse()) {
      const current = v.after && v.after === h.current_digest;
      const revertBtn = v.after && !current
        ? el('button', { type: 'button', class: 'revert', onclick: () => doRevert(v.after) }, 'Revert to this')
        : el('span', { class: 'small', text: current ? 'current' : '' });
      body.append(el('tr', { 'data-digest': v.after || '' },
        el('td', { text: v.time.replace('T', ' ').slice(0, 19) }),
        el('td', { text: v.action }),
        el('td', {}, el('code', { text: v.who })),
        el('td', {}, el('code', { text: v.after ? v.after.slice(0, 12) : absent })),
        el('td', { text: v.tokens === null || v.tokens === undefined ? '' : fmt(v.tokens) }),
        el('td', {}, revertBtn)));
    }
    table.append(body);
    const fromSel = el('select', { class: 'diff-from', 'aria-label': 'Diff from version' });
    const toSel = el('select', { class: 'diff-to', 'aria-label': 'Diff to version' });
    for (const c of choices) {
      fromSel.append(el('option', { value: c.digest, text: c.label }));
      toSel.append(el('option', { value: c.digest, text: c.label }));
    }
    const last = h.versions[h.versions.length - 1];
    fromSel.value = last.before || '';
    toSel.value = last.after || '';
    const out = el('div', { class: 'diff-out' });
    const showDiff = async () => {
      const r = await api('GET', historyUrl('/diff', { from: fromSel.value, to: toSel.value }));
      out.replaceChildren(r.ok ? diffView(r.data.diff) : el('p', { class: 'error small', text: r.data.error }));
    };
    history.append(table,
      el('div', { class: 'diff-pick' }, el('label', {}, 'From ', fromSel), ' ', el('label', {}, 'to ', toSel), ' ',
        el('button', { type: 'button', class: 'show-diff', onclick: showDiff }, 'Show diff')),
      out);
    showDiff();
  }

  async function doRevert(digest, overBudget) {
    const r = await api('POST', historyUrl('/revert'), { to: digest, if_digest: b.digest || '', over_budget: !!overBudget });
    if (r.ok) {
      say(b.label + ' reverted to ' + digest.slice(0, 12) + '.');
      await reload(target, r.data, id);
    } else {
      showError(result, r, b, target, 'Revert', () => doRevert(digest, true));
    }
  }

  function toggleSource() {
    const open = source.hidden;
    source.hidden = !open;
    sourceBtn.setAttribute('aria-expanded', String(open));
    if (!open) return;
    source.replaceChildren();
    if (b.state !== 'inherited') {
      source.append(el('p', { class: 'small' }, 'This layer (', el('code', { text: target.where }), '):'),
        el('pre', { class: 'content', text: b.text || '(empty)' }));
    }
    const eff = b.effective;
    if (eff && eff.sources.length) {
      source.append(el('p', { class: 'small', text: 'What the prompt uses now, widest layer first:' }));
      for (const s of eff.sources) {
        source.append(el('p', { class: 'small' }, el('strong', { text: s.label }), ' ', el('code', { text: s.source || '' })),
          el('pre', { class: 'content', text: s.text || '(empty)' }));
        // Imported files are part of the text above; shown under it, read-only.
        for (const i of s.imports || []) {
          source.append(el('p', { class: 'small imported' }, 'imports ', el('code', { text: i.source || '' }), ' (edit the file itself; it is read-only here)'),
            el('pre', { class: 'content', text: i.text || '(empty)' }));
        }
      }
    } else if (b.state === 'inherited') {
      source.append(el('p', { class: 'small', text: 'No layer in this chain has text here.' }));
    }
  }

  function confirmReset() {
    result.replaceChildren(
      el('p', {}, 'Reset deletes this layer\u2019s text so it inherits again.'),
      el('button', { type: 'button', class: 'danger confirm-reset', onclick: () => doReset() }, 'Confirm reset'),
      ' ',
      el('button', { type: 'button', onclick: () => { result.replaceChildren(); resetBtn.focus(); } }, 'Keep it'));
    result.querySelector('.confirm-reset').focus();
  }

  async function doReset(overBudget) {
    const params = new URLSearchParams(target.params || {});
    params.set('if_digest', b.digest || '');
    if (overBudget) params.set('over_budget', 'true');
    const r = await api('DELETE', targetUrl(target, b.block) + '?' + params.toString());
    if (r.ok) {
      say(b.label + ' reset; it inherits again.');
      await reload(target, null, id);
    } else {
      showError(result, r, b, target, 'Reset', () => doReset(true));
    }
  }

  function openEditor() {
    if (state.openEditor && state.openEditor !== editor) state.openEditor.dispatchEvent(new Event('close'));
    state.openEditor = editor;
    editor.hidden = false;
    overrideBtn.disabled = true;
    result.replaceChildren();
    const taId = 'ta-' + id;
    const count = el('p', { class: 'count', 'aria-live': 'polite', id: 'count-' + id }, 'Counting tokens\u2026');
    const meter = el('meter', { min: '0', max: '8192', value: '0', 'aria-label': 'Tokens with this text against the cap' });
    const textarea = el('textarea', { id: taId, rows: '8', spellcheck: 'true', 'aria-describedby': 'count-' + id });
    textarea.value = b.editor_text !== undefined ? b.editor_text : (b.text || '');
    const save = el('button', { type: 'button', class: 'primary save', onclick: () => doSave() }, 'Save');
    const cancel = el('button', { type: 'button', class: 'cancel', onclick: () => close() }, 'Cancel');
    editor.replaceChildren(...[
      isGuardrail(b.block) ? guardrailNote() : null,
      el('label', { for: taId }, 'Text for ' + b.label + ' (Ctrl+Enter saves, Escape cancels)'),
      textarea, meter, count,
      el('div', { class: 'actions' }, save, cancel)].filter(Boolean));
    let timer = null;
    let seq = 0;
    async function recount() {
      const mine = ++seq;
      const r = await api('POST', '/api/tokens', { ...(target.params || {}), bot: target.bot, chat: target.chat, block: b.block, text: textarea.value });
      if (mine !== seq) return;
      if (!r.ok) {
        count.textContent = r.data.error;
        count.className = 'count over';
        return;
      }
      const d = r.data;
      meter.max = d.cap;
      meter.high = Math.round(d.cap * 0.9);
      meter.optimum = 0;
      meter.value = Math.min(d.prefix_tokens, d.cap);
      let text = 'Prompt with this text: ' + fmt(d.prefix_tokens) + ' / ' + fmt(d.cap) + ' tokens (cap)';
      if (d.text_tokens !== null && d.text_tokens !== undefined) text += ' \u00b7 this text: ' + fmt(d.text_tokens);
      text += ' \u00b7 ' + d.model + ' window: ' + fmt(d.context_window) + (d.approximate ? ' (approximate count)' : '');
      if (d.forbidden) text += ' \u2014 the text holds ' + d.forbidden + ', a character no prompt may hold; a save would be refused.';
      else if (d.refused) text += ' \u2014 over the cap by ' + fmt(d.prefix_tokens - d.cap) + '; a save would be refused.';
      else if (d.over_cap) text += ' \u2014 still over the cap, but smaller than before, so a save is accepted.';
      if (d.not_applied) text += ' ' + d.not_applied + '.';
      count.textContent = text;
      count.className = 'count' + (d.refused ? ' over' : '');
      count.dataset.tokens = String(d.prefix_tokens);
    }
    textarea.addEventListener('input', () => {
      clearTimeout(timer);
      timer = setTimeout(recount, 250);
    });
    textarea.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') { e.preventDefault(); close(); }
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); doSave(); }
    });
    editor.addEventListener('close', close, { once: true });
    function close() {
      clearTimeout(timer);
      editor.hidden = true;
      editor.replaceChildren();
      result.replaceChildren();
      overrideBtn.disabled = false;
      if (state.openEditor === editor) state.openEditor = null;
      overrideBtn.focus();
    }
    async function doSave(overBudget) {
      save.disabled = true;
      const r = await api('PUT', targetUrl(target, b.block) + query(target.params || {}), { text: textarea.value, if_digest: b.digest, over_budget: !!overBudget });
      save.disabled = false;
      if (r.ok) {
        say(b.label + ' saved to ' + (r.data.path || r.data.key || target.where) + '.');
        state.openEditor = null;
        await reload(target, r.data, id);
      } else {
        showError(result, r, b, target, 'Save', () => doSave(true));
      }
    }
    recount();
    textarea.focus();
  }
  return node;
}

// A unified diff, one line per row, added and removed lines marked.
function diffView(text) {
  if (!text) return el('p', { class: 'small', text: 'No difference.' });
  const pre = el('pre', { class: 'diff' });
  for (const line of text.split('\n')) {
    let cls = 'ctx';
    if (line.startsWith('+++') || line.startsWith('---')) cls = 'head';
    else if (line.startsWith('+')) cls = 'add';
    else if (line.startsWith('-')) cls = 'del';
    else if (line.startsWith('@@')) cls = 'hunk';
    pre.append(el('span', { class: 'line ' + cls, text: line }), '\n');
  }
  return pre;
}

// What `vak trust` would change for this project; nothing is written.
async function showTrustPreview(box) {
  box.replaceChildren(el('p', { class: 'small', text: 'Working out what trusting would change\u2026' }));
  const r = await api('GET', '/api/trust-preview');
  if (!r.ok) {
    box.replaceChildren(el('p', { class: 'error small', text: r.data.error }));
    return;
  }
  const d = r.data;
  box.replaceChildren(
    el('h3', { text: 'If you trust this project' }),
    el('p', {}, 'Prompt prefix: ', el('strong', { text: fmt(d.tokens.before) + ' \u2192 ' + fmt(d.tokens.after) }), ' tokens (cap ' + fmt(d.tokens.cap) + '). Nothing has been written.'));
  if (d.over) box.append(el('p', { class: 'error small', text: 'Over the cap on the chain for ' + d.over.chain + ' (' + fmt(d.over.prefix_tokens) + ' tokens): `vak trust` would refuse without --over-budget.' }));
  box.append(el('p', { class: 'small', text: d.config_keys.length ? 'Config keys that would apply: ' + d.config_keys.map((k) => k.key + ' (' + k.source + ')').join(', ') : 'No config keys would change.' }));
  if (d.unproven) box.append(el('p', { class: 'error small', text: 'Not every layer could be looked at: `vak trust` would refuse without --over-budget.' }));
  if (d.not_budgeted) box.append(el('p', { class: 'small', text: d.not_budgeted }));
  for (const change of d.blocks) {
    box.append(el('h4', { text: change.block + ' would be ' + change.change }), diffView(change.diff));
  }
  if (!d.blocks.length) {
    box.append(el('p', { class: 'small', text: d.unproven ? 'No part of the prompt text would change on the chains looked at.' : d.elsewhere.length ? 'No part of the prompt text would change on this chain.' : 'No part of the prompt text would change.' }));
  }
  // What trusting changes on the other chains it reaches: a role, a surface, a directory layer.
  for (const change of d.elsewhere) {
    const shown = change.chains.slice(0, 3).join('; ') + (change.chains.length > 3 ? '; and ' + (change.chains.length - 3) + ' more' : '');
    box.append(el('h4', { class: 'elsewhere', text: 'Elsewhere, ' + change.block + ' would be ' + change.change + ' (on the chain for ' + shown + ')' }), diffView(change.diff));
  }
}

function targetUrl(target, block) {
  if (target.kind === 'bot') return '/api/gateway/bots/' + encodeURIComponent(target.bot) + '/' + block;
  if (target.kind === 'chat') return '/api/gateway/chats/' + encodeURIComponent(target.bot) + '/' + encodeURIComponent(target.chat) + '/' + block;
  return '/api/layers/' + block;
}

// Re-render after a change, and put the keyboard focus back on the card
// that changed (its nodes were replaced).
async function reload(target, saved, id) {
  if (target.kind === 'layer') await loadPrompts();
  else await loadGateway();
  const again = id && document.getElementById('card-' + id);
  if (again) again.querySelector('button.override').focus();
  if (saved && saved.lints && saved.lints.length) say('Saved, with notes: ' + saved.lints.join(' '));
  if (saved && saved.not_applied) say('Saved. ' + saved.not_applied + '.');
}

function layerName(l) {
  const names = { shared: 'Shared', project: 'This project', surface: 'Surface', bot: 'Bot', chat: 'Chat', agent: 'Agent role' };
  return (names[l.layer] || l.layer) + ' (' + l.origin + ')';
}

// 409, 422 and the rest, said plainly next to the editor. `anyway` repeats
// the change with `over_budget`: going ahead over the cap, or past chains
// that could not be checked, recorded in the version history.
function showError(box, r, b, target, what, anyway) {
  box.replaceChildren();
  if (r.status === 409) {
    box.className = 'result conflict';
    box.append(
      el('p', {}, el('strong', { text: 'Someone else changed this since you opened it, so your save was not applied. ' }),
        'Your text is still in the editor. Load their version, then redo your change.'),
      el('p', { class: 'small', text: r.data.error }),
      el('button', { type: 'button', onclick: () => reload(target, null, box.dataset.card) }, 'Load their version'));
  } else if (r.status === 422 && r.data.unchecked) {
    box.className = 'result refused';
    box.append(el('p', {}, el('strong', { text: (what || 'Save') + ' refused: not every prompt this change reaches could be checked against the cap. ' }),
      'Nothing was changed. One not checked could go over it: ', r.data.unchecked));
    if (anyway) box.append(el('button', { type: 'button', class: 'danger anyway', onclick: () => anyway() }, (what || 'Save') + ' anyway'));
  } else if (r.status === 422) {
    box.className = 'result refused';
    const t = r.data.tokens || {};
    const list = el('ul', { class: 'offenders' });
    for (const l of r.data.offenders || []) {
      const files = (l.sources || []).map((s) => (s.source || '?') + ' (' + s.block + ' ' + fmt(s.tokens) + ')').join(', ');
      list.append(el('li', {}, el('strong', { text: layerName(l) + ': ' + fmt(l.tokens) + ' tokens' }), files ? ' \u2014 ' + files : ''));
    }
    const chains = r.data.chains || [];
    const over = el('ul', { class: 'chains' });
    for (const c of chains) {
      over.append(el('li', {}, el('strong', { text: c.chain + (c.project ? ' in ' + c.project : '') + ': ' + fmt(c.prefix_tokens) + ' tokens' }), ' (cap ' + fmt(c.cap) + ')'));
    }
    box.append(
      el('p', {}, el('strong', { text: (what || 'Save') + ' refused: ' + (chains.length > 1 ? chains.length + ' prompts would be over the cap; the largest ' : 'the prompt ') + 'would be ' + fmt(t.prefix) + ' tokens, over the ' + fmt(t.cap) + '-token cap by ' + fmt(r.data.over_by) + '.' }),
        ' Nothing was saved or truncated. Shorten one of these layers (largest first), raise ', el('code', { text: '[prompts] max_tokens' }), ' in the shared config, or save anyway (recorded as over the cap):'),
      list);
    if (chains.length > 1) box.append(el('p', { class: 'small', text: 'Every prompt over the cap:' }), over);
    if (anyway) box.append(el('button', { type: 'button', class: 'danger anyway', onclick: () => anyway() }, (what || 'Save') + ' anyway'));
  } else {
    box.className = 'result failed';
    box.append(el('p', {}, el('strong', { text: 'Not saved (' + (r.status || 'no answer') + '): ' }), r.data.error));
  }
  box.focus();
}

function renderEffective(p) {
  const t = p.tokens || {};
  $('#effective-tokens').textContent = fmt(t.prefix) + ' / ' + fmt(t.cap);
  const meter = $('#effective-meter');
  meter.max = t.cap || 8192;
  meter.high = Math.round((t.cap || 8192) * 0.9);
  meter.value = Math.min(t.prefix || 0, t.cap || 8192);
  $('#effective-window').textContent = 'Tokens in the assembled prompt against the cap; ' + t.model + ' has a ' + fmt(t.context_window) + '-token window. Trust: ' + p.trust + '.';
  const list = $('#effective');
  list.replaceChildren();
  for (const b of p.blocks) {
    const sources = el('ul', { class: 'sources' });
    b.layers.forEach((layer, i) => {
      sources.append(el('li', {}, el('strong', { text: layer }), ' ', el('code', { text: b.sources[i] || '' })));
      for (const imp of (b.imports || []).filter((m) => m.by === b.sources[i])) {
        sources.append(el('li', { class: 'imported' }, 'imports ', el('code', { text: imp.source || '' })));
      }
    });
    for (const s of b.shadowed || []) sources.append(el('li', { class: 'shadowed' }, 'shadows ', el('strong', { text: s.layer }), ' ', el('code', { text: s.source || '' })));
    list.append(el('li', { 'data-name': b.block },
      el('details', {},
        el('summary', {}, el('span', { class: 'name', text: b.block }), ' ', el('span', { class: 'prov', text: b.summary })),
        sources,
        b.text ? el('pre', { class: 'content', text: b.text }) : el('p', { class: 'small', text: '(nothing)' }))));
  }
  const extra = $('#effective-extra');
  extra.replaceChildren();
  if (p.demoted && p.demoted.length) {
    const ul = el('ul', { class: 'demoted' });
    for (const d of p.demoted) ul.append(el('li', {}, el('strong', { text: (d.key || d.block) + ' ' }), el('code', { text: d.source || '' }), ' \u2014 ' + d.reason));
    extra.append(el('h3', { text: 'Not applied' }), ul);
  }
  const warnings = (p.warnings || []).concat(p.budget_warnings || []);
  if (warnings.length) {
    const ul = el('ul', { class: 'warnings' });
    for (const w of warnings) ul.append(el('li', { text: w }));
    extra.append(el('h3', { text: 'Warnings' }), ul);
  }
  extra.append(el('p', { class: 'hint' }, 'Fingerprint ', el('code', { text: p.fingerprint })));
}

// ---- scoped rules (read-only) -------------------------------------------

// Rules scoped to paths join a turn's tail, never the prefix: listed with
// their globs beside the effective prompt, edited as files.
async function loadRules() {
  const r = await api('GET', '/api/rules');
  const box = $('#rules');
  if (!box) return;
  if (!r.ok) return box.replaceChildren(el('p', { class: 'error', text: r.data.error }));
  box.replaceChildren();
  if (!r.data.rules.length && !r.data.skipped.length) return;
  const rows = r.data.rules.map((x) => el('tr', {},
    el('td', {}, el('code', { text: x.name })),
    el('td', { text: x.block }),
    el('td', {}, ...x.globs.map((g) => el('code', { text: g + ' ' }))),
    el('td', {}, x.layer + ' ', el('code', { text: x.source }))));
  box.append(el('h3', { text: 'Scoped rules (in a turn\u2019s tail when it touches a matching path)' }),
    el('table', { class: 'rules' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col', text: 'Rule' }), el('th', { scope: 'col', text: 'Section' }), el('th', { scope: 'col', text: 'Paths' }), el('th', { scope: 'col', text: 'From' }))),
      el('tbody', {}, ...rows)));
  if (r.data.skipped.length) {
    const ul = el('ul', { class: 'warnings' });
    for (const s of r.data.skipped) ul.append(el('li', {}, el('code', { text: s.source }), ' \u2014 ' + s.reason));
    box.append(el('h4', { text: 'Rule files left out' }), ul);
  }
}

// ---- #/permissions ------------------------------------------------------

async function loadPermissions() {
  const r = await api('GET', '/api/permissions');
  const box = $('#permissions');
  if (!r.ok) return box.replaceChildren(el('p', { class: 'error', text: r.data.error }));
  const groups = { allow: 'Allow: runs without asking', ask: 'Ask: asks a person first', deny: 'Deny: never runs' };
  box.replaceChildren();
  for (const [kind, title] of Object.entries(groups)) {
    const rules = r.data.rules.filter((x) => x.kind === kind);
    const table = el('table', { class: 'rules' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col', text: 'Rule' }), el('th', { scope: 'col', text: 'From' }))),
      el('tbody', {}, ...(rules.length ? rules.map((x) => el('tr', {}, el('td', {}, el('code', { text: x.rule })), el('td', {}, x.origin + ' ', el('code', { text: x.source })))) : [el('tr', {}, el('td', { colspan: '2', text: 'None.' }))])));
    box.append(el('h2', { id: 'perm-' + kind, text: title }), table);
  }
  if (r.data.not_applied.length) {
    const ul = el('ul', {});
    for (const d of r.data.not_applied) ul.append(el('li', {}, el('code', { text: d.key || '' }), ' from ', el('code', { text: d.source || '' }), ' \u2014 ' + d.reason));
    box.append(el('h2', { text: 'Not applied (untrusted project)' }), ul);
  }
  box.append(el('p', { class: 'hint', text: 'Project trust: ' + r.data.trust + '.' }));
}

// ---- #/gateway ----------------------------------------------------------

async function loadGateway() {
  const r = await api('GET', '/api/gateway');
  const box = $('#gateway');
  if (!r.ok) return box.replaceChildren(el('p', { class: 'error', text: r.data.error }));
  box.replaceChildren();
  if (!r.data.bots.length) box.append(el('p', { text: 'No bots in ' + r.data.bots_file + ' yet.' }));
  for (const bot of r.data.bots) {
    const section = el('section', { class: 'bot', 'aria-label': 'Bot ' + bot.bot },
      el('h2', {}, 'Bot ', el('code', { text: bot.bot }), bot.display_name ? ' \u00b7 ' + bot.display_name : ''));
    const cards = el('div', { class: 'grid bot-grid' });
    for (const b of bot.prompts) cards.append(card({ kind: 'bot', bot: bot.bot, where: b.key }, b));
    section.append(cards);
    for (const chat of bot.chats) {
      section.append(el('h3', {}, 'Chat ', el('code', { text: chat.chat }), chat.name ? ' \u00b7 ' + chat.name : ''));
      const chatCards = el('div', { class: 'grid' });
      for (const b of chat.prompts) chatCards.append(card({ kind: 'chat', bot: bot.bot, chat: chat.chat, where: b.key }, b));
      section.append(chatCards);
    }
    box.append(section);
  }
  for (const p of r.data.problems) box.append(el('p', { class: 'error small', text: p }));
}

// ---- #/audit ------------------------------------------------------------

// Behind a rotation: what the old session froze against what the new one froze.
async function showRotationDiff(e, detail) {
  detail.hidden = !detail.hidden;
  if (detail.hidden) return;
  const cell = detail.firstChild;
  cell.replaceChildren(el('p', { class: 'small', text: 'Loading the text diff\u2026' }));
  const r = await api('GET', '/api/audit/diff' + query({ old: e.old_session, new: e.new_session }));
  if (!r.ok) return cell.replaceChildren(el('p', { class: 'error small', text: r.data.error }));
  cell.replaceChildren();
  if (!r.data.changes.length) cell.append(el('p', { class: 'small', text: 'Both sessions froze the same text.' }));
  for (const c of r.data.changes) {
    cell.append(el('h4', {}, c.block + ' @ ' + c.layer + ' ', el('code', { text: c.source || '' })),
      c.diff !== null ? diffView(c.diff) : el('p', { class: 'small', text: c.error }));
  }
}

async function loadAudit() {
  const r = await api('GET', '/api/audit');
  const box = $('#audit');
  if (!r.ok) return box.replaceChildren(el('p', { class: 'error', text: r.data.error }));
  if (!r.data.events.length) return box.replaceChildren(el('p', { text: 'No security events yet.' }));
  const rows = [];
  for (const e of r.data.events) {
    const detail = el('tr', { class: 'rotation-diff', hidden: true }, el('td', { colspan: '6' }));
    const diffBtn = e.type === 'config-change' && e.old_session && e.new_session
      ? el('button', { type: 'button', class: 'show-rotation-diff', onclick: () => showRotationDiff(e, detail) }, 'Show the text diff')
      : null;
    rows.push(el('tr', {},
      el('td', { text: e.at || '' }),
      el('td', { text: e.type }),
      el('td', { text: (e.bot || '') + (e.chat ? ' / ' + e.chat : '') }),
      el('td', {}, el('code', { text: (e.old_session || '') + ' \u2192 ' + (e.new_session || '') })),
      el('td', { text: (e.changes || []).map((c) => (c.block || '') + ' @ ' + (c.layer || '') + ' ' + (c.kind || '')).join('; ') }),
      el('td', {}, diffBtn)), detail);
  }
  box.replaceChildren(el('table', { class: 'rules' },
    el('thead', {}, el('tr', {}, ...['When', 'Event', 'Bot / chat', 'Sessions', 'What changed', ''].map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, ...rows)));
  for (const w of r.data.warnings) box.append(el('p', { class: 'note small', text: w }));
}

// ---- wiring -------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  $('#login-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    state.token = $('#token-input').value.trim();
    const r = await api('GET', '/api/layers?scope=shared');
    if (r.status === 401) return;
    sessionStorage.setItem(TOKEN_KEY, state.token);
    $('#token-input').value = '';
    if (!location.hash || location.hash === '#/') location.hash = '#/prompts';
    else route();
    say('Signed in.');
  });
  $('#logout').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = '';
    showLogin();
  });
  for (const b of document.querySelectorAll('.scope button')) {
    b.addEventListener('click', () => {
      state.scope = b.dataset.scope;
      if (state.scope !== 'project' && state.sub.startsWith('dir/')) state.sub = 'base';
      loadPrompts();
    });
  }
  $('#sub-select').addEventListener('change', (e) => {
    state.sub = e.target.value;
    loadPrompts();
  });
  $('#role-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const role = $('#role-input').value.trim();
    if (!role) return;
    state.sub = 'agents/' + role;
    loadPrompts();
  });
  window.addEventListener('hashchange', route);
  route();
});
