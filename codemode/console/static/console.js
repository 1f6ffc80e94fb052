// codemode console: the page's only script. No framework, no build step.
// Everything the server sends (program source, output, command lines, paths) is untrusted: it is
// shown through textContent and DOM nodes only, never parsed as HTML. The interface it speaks is
// docs/console/API.md.
'use strict';

(() => {
  const API = '/console/api';
  const ARCHIVE_LIMIT = 16384;
  const KEY_BATCH_MS = 30; // keys typed within this window go in one input request
  const MAX_ACTIONS = 200; // what the server keeps
  const MAX_RUNS = 100; // per session, likewise

  const state = {
    me: null, // {mode, tenant}
    sessions: new Map(), // session_id -> Session
    selected: null, // the session_id shown in the middle column
    runs: [], // its programs (Run), newest first
    processes: [],
    notices: [],
    approvals: new Map(), // id -> Approval, pending ones only
    trash: [],
    actions: [],
    run: null, // the open program: {sid, runId, detail, early, endedEarly, expanded}
    archive: null, // the archive pager: {sid, ref, page, back: [offsets of earlier pages]}
    term: null, // the open terminal (see openTerminal)
    events: null, // the app's EventSource
    eventsRetry: null,
    clock: null,
  };

  // ---------- small helpers ----------

  const $ = (sel) => document.querySelector(sel);
  const enc = encodeURIComponent;
  const readOnly = () => !state.me || state.me.mode !== 'on';
  const sessPath = (sid) => `${API}/sessions/${enc(sid)}`;
  const procPath = (sid, pid) => `${sessPath(sid)}/processes/${enc(pid)}`;
  const parseJSON = (text) => {
    try {
      return JSON.parse(text);
    } catch {
      return null;
    }
  };

  // h('li', {class: 'x', data: {runId: '1'}, onclick: f}, 'text', child): builds an element.
  // Strings become text nodes; nothing is ever parsed as HTML.
  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v == null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = String(v);
      else if (k === 'data') for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = String(dv);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k in el) el[k] = v;
      else el.setAttribute(k, String(v));
    }
    for (const kid of kids.flat()) if (kid != null && kid !== false) el.append(kid);
    return el;
  }

  // Fills a list; a placeholder item when there is nothing.
  function fill(ul, items, emptyText) {
    ul.replaceChildren(...items);
    if (!items.length) ul.append(h('li', { class: 'empty', text: emptyText }));
  }

  // An item that opens something on click or Enter.
  const clickable = (props, fn) => ({
    ...props, tabIndex: 0, onclick: fn, onkeydown: (ev) => ev.key === 'Enter' && fn(),
  });

  function fmtTime(t) {
    if (t == null) return '—';
    const d = new Date(t * 1000);
    const opts = { hour12: false, hour: '2-digit', minute: '2-digit', second: '2-digit' };
    if (d.toDateString() === new Date().toDateString()) return d.toLocaleTimeString([], opts);
    return d.toLocaleString([], { ...opts, year: 'numeric', month: '2-digit', day: '2-digit' });
  }

  function fmtAgo(t) {
    if (t == null) return '—';
    const s = Math.max(0, Date.now() / 1000 - t);
    if (s < 5) return 'just now';
    if (s < 60) return `${Math.floor(s)} s ago`;
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    return s < 86400 ? `${Math.floor(s / 3600)} h ago` : `${Math.floor(s / 86400)} d ago`;
  }

  function fmtMs(ms) {
    if (ms == null) return '—';
    if (ms < 1000) return `${Math.round(ms)} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
    return `${Math.floor(ms / 60000)}m ${String(Math.floor((ms % 60000) / 1000)).padStart(2, '0')}s`;
  }

  function fmtBytes(n) {
    if (n == null) return '—';
    if (n < 1024) return `${n} B`;
    return n < 1048576 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1048576).toFixed(1)} MiB`;
  }

  // A relative time ("3 min ago") that the clock keeps fresh.
  const ago = (t) => h('span', { class: 'rel', title: fmtTime(t), data: { t: t ?? '' }, text: fmtAgo(t) });
  const badge = (text, cls) => h('span', { class: `badge ${cls || ''}`, text });
  const short = (s, n) => (String(s ?? '').length > n ? `${String(s).slice(0, n - 1)}…` : String(s ?? ''));
  const oneLine = (s) => String(s ?? '').replace(/\s+/g, ' ').trim();
  const plural = (n, word, words = `${word}s`) => `${n} ${n === 1 ? word : words}`;

  let statusTimer = null;
  // The status line: an error stays until replaced or clicked away, news goes by itself.
  function setStatus(text, kind = 'error') {
    const el = $('#status');
    clearTimeout(statusTimer);
    el.textContent = text || '';
    el.className = kind;
    el.hidden = !text;
    if (text && kind === 'info') statusTimer = setTimeout(() => setStatus(''), 4000);
  }

  // ---------- HTTP ----------

  class HttpError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // The login's key: the cookie alone is no credential (a browser sends it to every port of
  // this host, where a command may serve a page); this tab's storage is this origin's only.
  const KEY_STORE = 'codemode_console_key';
  const loginKey = () => sessionStorage.getItem(KEY_STORE) || '';
  // An event stream's URL: EventSource sends no header of ours, so the key goes in its query.
  const streamURL = (url) => `${url}${url.includes('?') ? '&' : '?'}key=${encodeURIComponent(loginKey())}`;

  async function request(method, url, body) {
    const init = { method, credentials: 'same-origin', headers: { 'X-Codemode-Console': loginKey() } };
    if (method === 'POST') {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body ?? {});
    }
    let resp;
    try {
      resp = await fetch(url, init);
    } catch (e) {
      throw new HttpError(0, `the server cannot be reached (${e.message})`);
    }
    const data = parseJSON(await resp.text());
    if (resp.ok) return data;
    const msg = data && typeof data.error === 'string' ? data.error : `HTTP ${resp.status}`;
    if (resp.status === 401 && url.startsWith(API)) onUnauthorized(msg);
    throw new HttpError(resp.status, msg);
  }

  const getJSON = (url) => request('GET', url);
  const postJSON = (url, body) => request('POST', url, body);

  // An operator action: POSTs, tells the outcome in #status, answers the reply or null.
  async function act(label, url, body) {
    try {
      const reply = await postJSON(url, body);
      setStatus(`${label}: done`, 'info');
      return reply ?? {};
    } catch (e) {
      if (e.status !== 401) setStatus(`${label}: ${e.message}`);
      return null;
    }
  }

  // Loads one list; an error goes to the status line (a 401 has already brought the login back).
  async function load(what, url, apply) {
    try {
      apply(await getJSON(url));
    } catch (e) {
      if (e.status !== 401) setStatus(`loading ${what}: ${e.message}`);
    }
  }

  // ---------- login, logout, start ----------

  function showLogin(message) {
    teardown();
    for (const id of ['#app-view', '#logout', '#live', '#approvals-count']) $(id).hidden = true;
    $('#mode').textContent = '—';
    $('#mode').className = 'badge';
    $('#tenant').textContent = '';
    document.title = 'codemode console';
    $('#login-view').hidden = false;
    $('#login-error').textContent = message || '';
    $('#login-error').hidden = !message;
    $('#login-token').focus();
  }

  function onUnauthorized(msg) {
    if (state.me) showLogin(`Logged out: ${msg}`);
  }

  async function submitLogin(ev) {
    ev.preventDefault();
    const input = $('#login-token');
    $('#login-error').hidden = true;
    $('#login-submit').disabled = true;
    try {
      const reply = await postJSON('/console/login', { token: input.value });
      sessionStorage.setItem(KEY_STORE, (reply && reply.key) || '');
      input.value = '';
      startApp(await getJSON(`${API}/me`));
    } catch (e) {
      $('#login-error').textContent = e.message;
      $('#login-error').hidden = false;
    } finally {
      $('#login-submit').disabled = false;
    }
  }

  async function logout() {
    try {
      await postJSON('/console/logout', {});
      sessionStorage.removeItem(KEY_STORE);
      showLogin('');
    } catch (e) {
      setStatus(`log out: ${e.message}`);
    }
  }

  function startApp(me) {
    teardown();
    state.me = me;
    const ro = readOnly();
    document.body.classList.toggle('read-only', ro);
    $('#mode').textContent = me.mode;
    $('#mode').className = `badge mode-${ro ? 'read-only' : 'on'}`;
    $('#tenant').textContent = me.tenant ? `tenant ${me.tenant}` : '';
    // Read-only: no action control at all (the list items leave theirs out).
    for (const id of ['#takeover', '#handback', '#stop-process', '#trash-empty']) {
      $(id).disabled = ro;
      $(id).hidden = ro;
    }
    $('#login-view').hidden = true;
    for (const id of ['#app-view', '#logout', '#live']) $(id).hidden = false;
    setStatus('');
    renderSessionHead();
    startEvents();
    refreshAll();
    state.clock = setInterval(refreshRelativeTimes, 5000);
  }

  function teardown() {
    stopEvents();
    closeTerminal();
    closeRun();
    clearInterval(state.clock);
    for (const t of debounced.values()) clearTimeout(t);
    debounced.clear();
    Object.assign(state, {
      me: null, selected: null, runs: [], processes: [], notices: [], trash: [], actions: [], clock: null,
    });
    state.sessions.clear();
    state.approvals.clear();
    for (const id of ['#sessions', '#runs', '#processes', '#feed', '#approvals', '#trash', '#actions']) {
      $(id).replaceChildren();
    }
  }

  function refreshAll() {
    const jobs = [loadSessions(), loadApprovals(), loadTrash(), loadActions()];
    if (state.selected) jobs.push(loadSessionData(state.selected));
    if (state.run) jobs.push(reloadRun());
    return Promise.all(jobs);
  }

  function refreshRelativeTimes() {
    for (const el of document.querySelectorAll('.rel[data-t]')) {
      if (el.dataset.t) el.textContent = fmtAgo(Number(el.dataset.t));
    }
  }

  const debounced = new Map();
  function debounce(key, ms, fn) {
    clearTimeout(debounced.get(key));
    debounced.set(key, setTimeout(() => {
      debounced.delete(key);
      if (state.me) fn();
    }, ms));
  }

  // ---------- live events ----------

  function startEvents() {
    stopEvents();
    const es = new EventSource(streamURL(`${API}/events`));
    state.events = es;
    const on = (name, fn) => es.addEventListener(name, (ev) => {
      const msg = parseJSON(ev.data);
      if (msg && state.events === es) fn(msg);
    });
    es.addEventListener('open', () => {
      setLive(true);
      refreshAll(); // catch up on what happened while the stream was down
    });
    es.addEventListener('error', () => {
      setLive(false);
      // After a dropped connection the browser reconnects by itself; a refused one (401, 5xx)
      // closes the source: check the login, then open a new one.
      if (es.readyState === EventSource.CLOSED && state.events === es) retryEvents(3000);
    });
    on('session', onSessionEvent);
    on('run', onRunEvent);
    on('call', onCallEvent);
    on('approval', onApprovalEvent);
    on('notice', onNoticeEvent);
    on('action', onActionEvent);
    // Not in API.md: the server ends the stream of a page that fell behind with `lagged`.
    on('lagged', () => startEvents());
  }

  function retryEvents(delay) {
    stopEvents();
    state.eventsRetry = setTimeout(async () => {
      state.eventsRetry = null;
      try {
        await getJSON(`${API}/me`);
        if (state.me) startEvents();
      } catch (e) {
        if (e.status !== 401 && state.me) retryEvents(Math.min(delay * 2, 30000));
      }
    }, delay);
  }

  function stopEvents() {
    clearTimeout(state.eventsRetry);
    state.eventsRetry = null;
    if (state.events) state.events.close();
    state.events = null;
    setLive(false);
  }

  function setLive(on) {
    $('#live').textContent = on ? 'live' : 'reconnecting…';
    $('#live').className = `live ${on ? 'on' : 'off'}`;
  }

  function onSessionEvent(s) {
    // An event does not count live processes (null): keep the count the last list gave.
    const known = state.sessions.get(s.session_id);
    if (s.live_processes == null) s.live_processes = known ? known.live_processes : 0;
    state.sessions.set(s.session_id, s);
    renderSessions();
    if (s.session_id !== state.selected) return;
    renderSessionHead();
    // Processes have no event of their own: a change of their session may be one of theirs.
    debounce('processes', 300, () => loadProcesses(s.session_id));
  }

  function onRunEvent(run) {
    if (run.session_id === state.selected) {
      upsertRun(run);
      renderRuns();
    }
    if (run.status !== 'running') debounce('trash', 1000, loadTrash); // it may have deleted files
    const r = state.run;
    if (!r || r.sid !== run.session_id || r.runId !== run.run_id) return;
    if (!r.detail) {
      if (run.status !== 'running') r.endedEarly = true; // see reloadRun
      return;
    }
    if (r.detail.status !== 'running') return;
    if (run.status !== 'running') {
      // Its end shows with its output, usage and error, all from the detail at once: never an
      // ended badge over a "(running…)" output. (If the detail still says running, reloadRun
      // asks once more.)
      r.endedEarly = true;
      reloadRun();
      return;
    }
    // Not Run.calls: in a RunDetail, calls is the list of calls.
    for (const k of ['status', 'duration_ms', 'started', 'first_line']) r.detail[k] = run[k];
    renderRunHead();
  }

  function onCallEvent(msg) {
    const r = state.run;
    if (!r || r.sid !== msg.session_id || r.runId !== msg.run_id || !msg.call) return;
    if (!r.detail) {
      r.early.push(msg.call); // applied when the detail comes
      return;
    }
    upsertCall(r.detail, msg.call);
    renderRunHead();
    renderTimeline();
  }

  function onApprovalEvent(msg) {
    if (msg.state === 'pending') state.approvals.set(msg.id, msg);
    else state.approvals.delete(msg.id);
    renderApprovals();
  }

  function onNoticeEvent(n) {
    if (n.session_id !== state.selected) return;
    state.notices.push(n);
    const ul = $('#feed');
    const atBottom = ul.scrollHeight - ul.scrollTop - ul.clientHeight < 24;
    ul.querySelectorAll('.empty').forEach((e) => e.remove());
    ul.append(noticeItem(n));
    if (atBottom) ul.scrollTop = ul.scrollHeight;
  }

  function onActionEvent(a) {
    state.actions = [a, ...state.actions].slice(0, MAX_ACTIONS);
    renderActions();
    debounce('trash', 500, loadTrash);
  }

  // An ended run or call is never taken back to running by an older message arriving late.
  const newer = (old, next) => !(old && old.status !== 'running' && next.status === 'running');

  function upsertRun(run) {
    const i = state.runs.findIndex((r) => r.run_id === run.run_id);
    if (i < 0) state.runs.unshift(run);
    else if (newer(state.runs[i], run)) state.runs[i] = { ...state.runs[i], ...run };
    state.runs.sort((a, b) => (b.started ?? 0) - (a.started ?? 0));
    state.runs.length = Math.min(state.runs.length, MAX_RUNS);
  }

  function upsertCall(detail, call) {
    const i = detail.calls.findIndex((c) => c.id === call.id);
    if (i < 0) detail.calls.push(call);
    else if (newer(detail.calls[i], call)) detail.calls[i] = call;
  }

  // ---------- sessions ----------

  function loadSessions() {
    return load('sessions', `${API}/sessions`, (list) => {
      state.sessions = new Map(list.map((s) => [s.session_id, s]));
      renderSessions();
      renderSessionHead();
    });
  }

  function renderSessions() {
    const list = [...state.sessions.values()].sort((a, b) => (b.last_activity ?? 0) - (a.last_activity ?? 0));
    fill($('#sessions'), list.map((s) => h('li', clickable({
      class: `item session${s.session_id === state.selected ? ' selected' : ''}${s.open ? '' : ' ended'}`,
      data: { sessionId: s.session_id },
    }, () => selectSession(s.session_id)),
    h('div', { class: 'row' },
      badge(s.open ? 'open' : 'ended', s.open ? 'ok' : 'muted'),
      s.here === false && badge('another front', 'muted'),
      h('strong', { class: 'ellipsis', text: s.client || '(unnamed client)' }),
      h('span', { class: 'spacer' }),
      ago(s.last_activity)),
    h('div', { class: 'row muted mono small', title: s.session_id, text: short(s.session_id, 30) }),
    h('div', { class: 'row muted small', text: `started ${fmtTime(s.started)} · ${s.sandbox} · network ${s.network}` }),
    h('div', { class: 'row small', text: `${plural(s.runs, 'program')} · ${plural(s.live_processes, 'live process', 'live processes')}` }))),
    'No sessions yet.');
  }

  function selectSession(sid) {
    if (sid === state.selected) return;
    Object.assign(state, { selected: sid, runs: [], processes: [], notices: [] });
    if (state.run && state.run.sid !== sid) closeRun();
    renderSessions();
    renderSessionHead();
    renderRuns();
    renderProcesses();
    renderFeed();
    loadSessionData(sid);
  }

  function renderSessionHead() {
    const s = state.sessions.get(state.selected);
    $('#session-head').replaceChildren(...(state.selected ? [
      h('h2', {}, 'Session ', h('span', { class: 'mono', text: state.selected })),
      s && h('p', { class: 'muted' },
        `${s.client || '(unnamed client)'} · ${s.open ? 'open' : 'ended'}${s.here === false ? ' on another front' : ''} · started ${fmtTime(s.started)} · last activity `,
        ago(s.last_activity), ` · sandbox ${s.sandbox} · network ${s.network}`),
    ] : [h('p', { class: 'muted', text: 'Select a session on the left.' })]));
  }

  function loadSessionData(sid) {
    return Promise.all([loadRuns(sid), loadProcesses(sid), loadNotices(sid)]);
  }

  // ---------- programs ----------

  function loadRuns(sid) {
    return load('programs', `${sessPath(sid)}/runs`, (list) => {
      if (state.selected !== sid) return;
      state.runs = list;
      renderRuns();
    });
  }

  function renderRuns() {
    const openId = state.run && state.run.runId;
    fill($('#runs'), state.runs.map((r) => h('li', clickable({
      class: `item run${r.run_id === openId ? ' selected' : ''}`,
      data: { runId: r.run_id, status: r.status },
    }, () => openRun(r.session_id || state.selected, r.run_id)),
    h('div', { class: 'row' },
      badge(r.status, r.status),
      h('code', { class: 'ellipsis', title: r.first_line, text: r.first_line || '(empty)' })),
    h('div', {
      class: 'row muted small',
      text: `${fmtTime(r.started)} · ${r.status === 'running' ? 'running' : fmtMs(r.duration_ms)} · ${plural(r.calls, 'call')}`,
    }))), state.selected ? 'No programs.' : '—');
  }

  async function openRun(sid, runId) {
    closeRun();
    state.run = { sid, runId, detail: null, early: [], endedEarly: false, expanded: new Set() };
    $('#run-detail').hidden = false;
    $('#run-title').textContent = runId;
    renderRuns();
    await reloadRun();
    if (state.run && state.run.runId === runId) $('#run-detail').scrollIntoView({ block: 'nearest' });
  }

  async function reloadRun() {
    const r = state.run;
    if (!r) return;
    try {
      const d = await getJSON(`${sessPath(r.sid)}/runs/${enc(r.runId)}`);
      if (state.run !== r) return;
      d.calls = Array.isArray(d.calls) ? d.calls : [];
      r.early.forEach((c) => upsertCall(d, c));
      r.early = [];
      r.detail = d;
      renderRunDetail();
      if (d.status === 'running' && r.endedEarly) reloadRun(); // it ended while this was on its way
      r.endedEarly = false;
    } catch (e) {
      if (e.status !== 401) setStatus(`program ${r.runId}: ${e.message}`);
    }
  }

  function closeRun() {
    state.run = null;
    state.archive = null;
    stopTick();
    $('#run-detail').hidden = true;
    for (const id of ['#run-source', '#run-output', '#timeline', '#run-meta', '#archive-text']) $(id).replaceChildren();
    if (state.me) renderRuns();
  }

  function renderRunDetail() {
    const d = state.run.detail;
    renderRunHead();
    renderSource(d.source || '', d.error && d.error.line);
    const e = d.error;
    $('#run-error').hidden = !e;
    $('#run-error').replaceChildren(...(e ? [
      h('strong', { text: `${e.name || e.kind}: ` }),
      h('span', { class: 'pre', text: e.message || '' }),
      e.line != null && h('span', { class: 'muted', text: ` (line ${e.line})` }),
      h('span', { class: 'muted', text: ` [${e.kind}]` }),
    ] : []));
    $('#run-output').textContent = d.output || (d.status === 'running' ? '(running…)' : '(no output)');
    $('#run-truncated').hidden = !d.truncated;
    $('#archive-box').hidden = !d.archive_ref;
    $('#archive').hidden = true;
    $('#archive-open').hidden = false;
    state.archive = null;
    renderTimeline();
  }

  // Status, duration, budget and usage (the clock redraws the duration while it runs).
  function renderRunHead() {
    const d = state.run && state.run.detail;
    if (!d) return;
    const b = d.budget || {};
    const u = d.usage || {};
    $('#run-status').textContent = d.status;
    $('#run-status').className = `badge ${d.status}`;
    renderRunClock();
    const pairs = [
      ['started', fmtTime(d.started)],
      ['output tokens', `${u.output_tokens ?? '—'} of ${b.max_output_tokens ?? '—'}`],
      ['tool calls', `${u.tool_calls ?? '—'}`],
      ['timeout', b.timeout_seconds != null ? `${b.timeout_seconds} s` : '—'],
      ['calls', `${d.calls.length}`],
    ];
    $('#run-meta').replaceChildren(...pairs.map(([k, v]) => h('div', {}, h('dt', { text: k }), h('dd', { text: v }))));
    ensureTick();
  }

  function renderRunClock() {
    const d = state.run && state.run.detail;
    if (!d) return;
    $('#run-duration').textContent = d.status === 'running'
      ? `running for ${fmtMs((Date.now() / 1000 - d.started) * 1000)}` : fmtMs(d.duration_ms);
  }

  // The source in a <pre> with a line-number gutter; the error's line (1-based) marked.
  function renderSource(source, errorLine) {
    const pre = $('#run-source');
    const lines = source.split('\n');
    if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
    const width = String(lines.length).length;
    pre.replaceChildren(...lines.map((text, i) => h('span', {
      class: `line${i + 1 === errorLine ? ' error-line' : ''}`, data: { line: i + 1 },
    },
    h('span', { class: 'ln', text: String(i + 1).padStart(width) }),
    h('span', { class: 'code', text: text || ' ' }))));
    const marked = pre.querySelector('.error-line');
    pre.scrollTop = marked ? Math.max(0, marked.offsetTop - pre.clientHeight / 3) : 0;
  }

  // ---------- the call timeline ----------

  // The calls in tree order (children under their parent, each level by start), with depth.
  function callTree(calls) {
    const ids = new Set(calls.map((c) => c.id));
    const kids = new Map();
    const roots = [];
    for (const c of calls) {
      if (c.parent && c.parent !== c.id && ids.has(c.parent)) {
        if (!kids.has(c.parent)) kids.set(c.parent, []);
        kids.get(c.parent).push(c);
      } else roots.push(c);
    }
    const byStart = (a, b) => (a.started ?? 0) - (b.started ?? 0);
    const out = [];
    const seen = new Set();
    const walk = (c, depth) => {
      if (seen.has(c.id)) return;
      seen.add(c.id);
      out.push({ call: c, depth });
      (kids.get(c.id) || []).sort(byStart).forEach((k) => walk(k, depth + 1));
    };
    roots.sort(byStart).forEach((c) => walk(c, 0));
    calls.filter((c) => !seen.has(c.id)).forEach((c) => walk(c, 0)); // a cycle of parents: flat
    return out;
  }

  // A call still running lasts until now (or until its program's end, if that came without it).
  function callMs(c, now, d) {
    if (c.duration_ms != null) return c.duration_ms;
    const end = d.status !== 'running' && d.duration_ms != null ? d.started + d.duration_ms / 1000 : now;
    return Math.max(0, (end - c.started) * 1000);
  }

  function renderTimeline() {
    const r = state.run;
    const box = $('#timeline');
    if (!r || !r.detail) return box.replaceChildren();
    if (!r.detail.calls.length) return box.replaceChildren(h('p', { class: 'muted', text: 'No calls.' }));
    const toggle = (id) => {
      if (!r.expanded.delete(id)) r.expanded.add(id);
      renderTimeline();
    };
    const rows = callTree(r.detail.calls).map(({ call: c, depth }) => {
      const open = r.expanded.has(c.id);
      const name = h('span', { class: 'tl-name', title: `${c.kind} ${c.name}` }, badge(c.kind, `kind-${c.kind}`), ` ${c.name}`);
      name.style.paddingLeft = `${depth * 16}px`;
      const row = h('div', { class: `tl-row${depth ? ' child' : ''}${open ? ' open' : ''}`, data: { callId: c.id, status: c.status } },
        name,
        h('span', { class: 'tl-args mono', title: c.args, text: short(oneLine(c.args), 120) || '—', onclick: () => toggle(c.id) }),
        h('span', { class: `tl-status ${c.status}`, text: c.code ? `${c.status} (${c.code})` : c.status }),
        h('span', { class: 'tl-dur' }),
        h('span', { class: 'tl-track' }, h('span', { class: `tl-bar ${c.status}` })));
      return open ? [row, h('pre', { class: 'tl-full', text: c.args })] : [row];
    });
    const head = h('div', { class: 'tl-row tl-head' },
      ['call', 'args (click: all)', 'status', 'time'].map((text) => h('span', { text })),
      h('span', { class: 'tl-track tl-scale' }, [0, 1, 2, 3, 4].map((i) => h('span', { class: `tick t${i}` }))));
    box.replaceChildren(head, ...rows.flat());
    layoutTimeline();
  }

  // Places the bars: from (started - run.started) for the call's duration, on a scale of the
  // run's duration (a running run: until now). Calls that ran at the same time overlap.
  function layoutTimeline() {
    const d = state.run && state.run.detail;
    if (!d) return;
    const now = Date.now() / 1000;
    const byId = new Map(d.calls.map((c) => [c.id, c]));
    let total = d.status !== 'running' && d.duration_ms != null ? d.duration_ms : (now - d.started) * 1000;
    for (const c of d.calls) total = Math.max(total, (c.started - d.started) * 1000 + callMs(c, now, d));
    total = Math.max(total, 1);
    const box = $('#timeline');
    box.querySelectorAll('.tl-scale .tick').forEach((t, i) => {
      t.textContent = fmtMs((total * i) / 4);
    });
    for (const row of box.querySelectorAll('.tl-row[data-call-id]')) {
      const c = byId.get(row.dataset.callId);
      const ms = callMs(c, now, d);
      const offset = (c.started - d.started) * 1000;
      const left = Math.min(100, Math.max(0, (offset * 100) / total));
      const bar = row.querySelector('.tl-bar');
      bar.style.left = `${left}%`;
      bar.style.width = `${Math.min(100 - left, (ms * 100) / total)}%`;
      bar.title = `${c.name}: from +${fmtMs(offset)} for ${fmtMs(ms)}`;
      row.querySelector('.tl-dur').textContent = c.duration_ms == null ? `${fmtMs(ms)}…` : fmtMs(ms);
    }
  }

  // While the open program runs, its bars and duration move about 4 times a second.
  let tick = null;
  function ensureTick() {
    const d = state.run && state.run.detail;
    if (d && d.status === 'running' && !tick) {
      tick = setInterval(() => {
        renderRunClock();
        layoutTimeline();
        ensureTick();
      }, 250);
    } else if (!d || d.status !== 'running') stopTick();
  }

  function stopTick() {
    clearInterval(tick);
    tick = null;
  }

  // ---------- the archive pager ----------

  async function archivePage(offset, back) {
    const a = state.archive;
    if (!a) return;
    try {
      const page = await getJSON(`${sessPath(a.sid)}/archive/${enc(a.ref)}?offset=${offset}&limit=${ARCHIVE_LIMIT}`);
      if (state.archive !== a) return;
      Object.assign(a, { page, back });
      $('#archive-text').textContent = page.text;
      $('#archive-info').textContent = `bytes ${page.offset}–${page.next_offset} of ${page.total_bytes}${page.eof ? ' (end)' : ''}`;
      $('#archive-prev').disabled = !back.length;
      $('#archive-next').disabled = !!page.eof;
      $('#archive').hidden = false;
      $('#archive-open').hidden = true;
    } catch (e) {
      if (e.status !== 401) setStatus(`archive: ${e.message}`);
    }
  }

  function openArchive() {
    const d = state.run && state.run.detail;
    if (!d || !d.archive_ref) return;
    state.archive = { sid: state.run.sid, ref: d.archive_ref, page: null, back: [] };
    archivePage(0, []);
  }

  function archiveNext() {
    const a = state.archive;
    if (a && a.page && !a.page.eof) archivePage(a.page.next_offset, [...a.back, a.page.offset]);
  }

  function archivePrev() {
    const a = state.archive;
    if (a && a.back.length) archivePage(a.back[a.back.length - 1], a.back.slice(0, -1));
  }

  // ---------- processes and the terminal ----------

  function loadProcesses(sid) {
    return load('processes', `${sessPath(sid)}/processes`, (list) => {
      if (state.selected === sid) {
        state.processes = list;
        renderProcesses();
      }
      const t = state.term;
      const p = t && t.sid === sid && list.find((x) => x.process_id === t.pid);
      if (p) {
        t.proc = p;
        renderTerminalHead();
      }
    });
  }

  function renderProcesses() {
    const openPid = state.term && state.term.pid;
    fill($('#processes'), state.processes.map((p) => h('li', {
      class: `item process${p.process_id === openPid ? ' selected' : ''}`,
      data: { processId: p.process_id, state: p.state },
    },
    h('div', { class: 'row' },
      badge(p.state, `state-${p.state}`),
      p.taken_over && badge('taken over', 'warn'),
      h('code', { class: 'ellipsis', title: p.command, text: p.command })),
    h('div', { class: 'row muted small' },
      h('span', {
        text: [p.kind, `started ${p.started}`, p.ended && `ended ${p.ended}`, p.exit_code != null && `exit ${p.exit_code}`,
          p.log_bytes != null && fmtBytes(p.log_bytes)].filter(Boolean).join(' · '),
      }),
      h('span', { class: 'spacer' }),
      h('button', { type: 'button', class: 'open-terminal small', text: 'Terminal', onclick: () => openTerminal(p) })))),
    state.selected ? 'No processes.' : '—');
  }

  function openTerminal(proc) {
    closeTerminal();
    if (typeof window.Terminal !== 'function' || !window.FitAddon) {
      setStatus('the terminal (xterm.js) did not load');
      return;
    }
    $('#terminal-panel').hidden = false;
    const term = new window.Terminal({
      convertEol: true, // output read from a pipe has bare \n
      cursorBlink: true,
      disableStdin: true, // until taken over
      fontSize: 13,
      scrollback: 5000,
      theme: { background: '#101216', foreground: '#d7dae0' },
    });
    const fit = new window.FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open($('#terminal'));
    const t = {
      sid: proc.session_id || state.selected, pid: proc.process_id, proc, term, fit,
      es: null, offset: 0, exited: false, exitCode: null, streamDown: false, retry: null, retryMs: 1000,
      mine: false, keys: '', keyTimer: null, sending: false,
    };
    state.term = t;
    fitTerminal();
    term.onData((data) => queueKeys(t, data));
    connectStream(t);
    renderTerminalHead();
    renderProcesses();
    $('#terminal-panel').scrollIntoView({ block: 'nearest' });
  }

  function connectStream(t) {
    const es = new EventSource(streamURL(`${procPath(t.sid, t.pid)}/stream?offset=${t.offset}`));
    t.es = es;
    const on = (name, fn) => es.addEventListener(name, (ev) => {
      if (state.term === t && t.es === es) fn(parseJSON(ev.data) || {});
    });
    on('open', () => {
      t.retryMs = 1000;
      t.streamDown = false;
      renderTerminalHead();
    });
    on('output', (m) => {
      if (typeof m.data === 'string') t.term.write(m.data);
      if (Number.isInteger(m.next_offset)) t.offset = m.next_offset;
    });
    on('exit', (m) => {
      es.close();
      Object.assign(t, { es: null, exited: true, mine: false, exitCode: m.exit_code ?? null });
      t.term.options.disableStdin = true;
      t.term.write(`\r\n\x1b[2m[exited ${t.exitCode ?? '?'}]\x1b[0m\r\n`);
      renderTerminalHead();
      loadProcesses(t.sid);
    });
    on('error', () => {
      if (t.exited) return;
      // The browser would reconnect with offset=0 and write everything again: reconnect by hand
      // from the offset reached.
      es.close();
      Object.assign(t, { es: null, streamDown: true });
      renderTerminalHead();
      t.retry = setTimeout(() => state.term === t && connectStream(t), t.retryMs);
      t.retryMs = Math.min(t.retryMs * 2, 15000);
    });
  }

  function closeTerminal() {
    const t = state.term;
    if (!t) return;
    state.term = null;
    if (t.es) t.es.close();
    clearTimeout(t.retry);
    clearTimeout(t.keyTimer);
    // Leaving a terminal hands it back: the process would wait for typing nobody sends.
    if (t.mine && !t.exited) postJSON(`${procPath(t.sid, t.pid)}/takeover`, { on: false }).catch(() => {});
    t.term.dispose();
    $('#terminal').replaceChildren();
    $('#terminal-panel').hidden = true;
    if (state.me) renderProcesses();
  }

  function fitTerminal() {
    if (!state.term || $('#terminal-panel').hidden) return;
    try {
      state.term.fit.fit();
    } catch {
      // not laid out yet
    }
    sendSize(state.term);
  }

  // While the person has the terminal, the process's PTY takes the page's size (the server
  // gives it back its own size at hand-back: the one the model's reads render).
  function sendSize(t) {
    if (!t || !t.mine || t.exited) return;
    const size = { rows: t.term.rows, cols: t.term.cols };
    if (t.sentSize && t.sentSize.rows === size.rows && t.sentSize.cols === size.cols) return;
    t.sentSize = size;
    postJSON(`${procPath(t.sid, t.pid)}/resize`, size).catch((e) => setStatus(`resize: ${e.message}`));
  }

  function renderTerminalHead() {
    const t = state.term;
    if (!t) return;
    $('#terminal-title').textContent = t.proc.command;
    $('#terminal-title').title = t.proc.command;
    let [text, cls] = ['watching', 'muted'];
    if (t.exited) [text, cls] = [`exited ${t.exitCode ?? '?'}`, 'muted'];
    else if (t.mine) [text, cls] = ['taken over by you', 'warn'];
    else if (t.proc.taken_over) [text, cls] = ['taken over', 'warn'];
    if (t.streamDown && !t.exited) text += ' · reconnecting…';
    $('#terminal-state').textContent = text;
    $('#terminal-state').className = `badge ${cls}`;
    const ro = readOnly();
    $('#takeover').hidden = ro || t.exited || t.mine;
    $('#handback').hidden = ro || t.exited || !(t.mine || t.proc.taken_over);
    $('#stop-process').hidden = ro || t.exited;
  }

  async function takeover(on) {
    const t = state.term;
    if (!t || readOnly()) return;
    if (!on) {
      // What was typed goes in before the terminal is handed back.
      clearTimeout(t.keyTimer);
      await flushKeys(t);
      t.mine = false;
      t.term.options.disableStdin = true;
    }
    const reply = await act(on ? 'take over' : 'hand back', `${procPath(t.sid, t.pid)}/takeover`, { on });
    if (state.term !== t) return;
    if (reply) {
      t.mine = on;
      t.proc = { ...t.proc, taken_over: on };
      t.term.options.disableStdin = !on;
      t.sentSize = null;
      if (on) {
        t.term.focus();
        sendSize(t);
      }
    }
    renderTerminalHead();
    loadProcesses(t.sid);
  }

  // Keys typed within KEY_BATCH_MS go in one request; one request in flight at a time, in order.
  function queueKeys(t, data) {
    if (!t.mine || t.exited || readOnly()) return;
    t.keys += data;
    if (!t.keyTimer && !t.sending) t.keyTimer = setTimeout(() => flushKeys(t), KEY_BATCH_MS);
  }

  async function flushKeys(t) {
    t.keyTimer = null;
    if (t.sending || !t.keys) return;
    const text = t.keys;
    t.keys = '';
    t.sending = true;
    try {
      await postJSON(`${procPath(t.sid, t.pid)}/input`, { text });
    } catch (e) {
      if (e.status !== 401) setStatus(`typing: ${e.message}`);
    } finally {
      t.sending = false;
    }
    if (t.keys && state.term === t) await flushKeys(t); // typed while that one was in flight
  }

  async function stopProcess() {
    const t = state.term;
    if (!t || readOnly() || !window.confirm(`Stop this process?\n\n${short(t.proc.command, 300)}`)) return;
    await act('stop', `${procPath(t.sid, t.pid)}/stop`, {});
    loadProcesses(t.sid);
  }

  // ---------- the feed ----------

  function loadNotices(sid) {
    return load('notices', `${sessPath(sid)}/notices`, (list) => {
      if (state.selected !== sid) return;
      state.notices = list;
      renderFeed();
    });
  }

  const noticeItem = (n) => h('li', { class: `item notice kind-${n.kind}`, data: { kind: n.kind } },
    h('div', { class: 'row small' }, badge(n.kind, `kind-${n.kind}`), h('span', { class: 'muted', text: fmtTime(n.time) })),
    h('div', { class: 'pre', text: n.text }));

  function renderFeed() {
    const ul = $('#feed');
    fill(ul, state.notices.map(noticeItem), state.selected ? 'No notices.' : '—');
    ul.scrollTop = ul.scrollHeight; // oldest first: the newest at the bottom
  }

  // ---------- approvals ----------

  function loadApprovals() {
    return load('approvals', `${API}/approvals`, (list) => {
      state.approvals = new Map(list.map((a) => [a.id, a]));
      renderApprovals();
    });
  }

  // Keyed: an approval already shown keeps its element, and the reason being typed into it.
  function renderApprovals() {
    const ul = $('#approvals');
    ul.querySelectorAll('.empty').forEach((e) => e.remove());
    const shown = new Set();
    for (const li of ul.querySelectorAll('[data-approval-id]')) {
      if (state.approvals.has(li.dataset.approvalId)) shown.add(li.dataset.approvalId);
      else li.remove();
    }
    const list = [...state.approvals.values()].sort((a, b) => (a.asked ?? 0) - (b.asked ?? 0));
    for (const a of list) if (!shown.has(a.id)) ul.append(approvalItem(a));
    if (!list.length) fill(ul, [], 'No pending approvals.');
    $('#approvals-count').hidden = !list.length;
    $('#approvals-count').textContent = `${plural(list.length, 'pending approval')}`;
    document.title = list.length ? `(${list.length}) codemode console` : 'codemode console';
  }

  function approvalItem(a) {
    const li = h('li', { class: 'item approval', data: { approvalId: a.id } },
      h('div', { class: 'row' }, badge(a.kind, 'warn'), h('strong', { class: 'pre', text: a.summary })),
      h('div', { class: 'row muted small' }, `asked ${fmtTime(a.asked)} · session `,
        h('span', { class: 'mono link', title: a.session_id, text: short(a.session_id, 16), onclick: () => selectSession(a.session_id) })),
      a.command != null && h('pre', { class: 'command', text: a.command }),
      a.cwd != null && h('div', { class: 'small' }, 'in ', h('code', { text: a.cwd })),
      a.paths && a.paths.length > 0 && h('ul', { class: 'paths' }, a.paths.map((p) => h('li', {}, h('code', { text: p })))),
      a.reason && h('div', { class: 'small' }, 'reason: ', h('span', { class: 'pre', text: a.reason })));
    if (readOnly()) return li;
    const reason = h('textarea', { class: 'approval-reason', rows: 2, placeholder: 'Reason (optional)' });
    const buttons = [];
    const decide = async (decision, label) => {
      buttons.forEach((b) => { b.disabled = true; });
      const url = `${API}/approvals/${enc(a.id)}`;
      if (await act(`${label} (${short(oneLine(a.summary), 40)})`, url, { decision, reason: reason.value.trim() })) {
        state.approvals.delete(a.id);
        renderApprovals();
      } else buttons.forEach((b) => { b.disabled = false; });
    };
    const button = (cls, text, decision) => h('button', { type: 'button', class: `${cls} action`, text, onclick: () => decide(decision, text) });
    buttons.push(button('approve-once', 'Allow once', 'allow'));
    if (a.can_remember) buttons.push(button('approve-session', 'Allow for session', 'allow_session'));
    buttons.push(button('deny danger', 'Deny', 'deny'));
    li.append(reason, h('div', { class: 'row buttons' }, buttons));
    return li;
  }

  // ---------- trash ----------

  function loadTrash() {
    return load('trash', `${API}/trash`, (list) => {
      state.trash = list;
      renderTrash();
    });
  }

  function renderTrash() {
    fill($('#trash'), state.trash.map((e) => h('li', { class: 'item trash', data: { trashId: e.id } },
      h('code', { class: 'ellipsis', title: e.path, text: e.path }),
      h('div', { class: 'row muted small' }, `deleted ${e.deleted} · ${fmtBytes(e.size)}`, h('span', { class: 'spacer' }),
        !readOnly() && h('button', { type: 'button', class: 'restore action small', text: 'Restore', onclick: (ev) => restoreTrash(e, ev.target) })))),
    'The trash is empty.');
    $('#trash-empty').disabled = readOnly() || !state.trash.length;
  }

  async function restoreTrash(e, button) {
    button.disabled = true;
    await act(`restore ${short(e.path, 60)}`, `${API}/trash/${enc(e.id)}/restore`, {});
    loadTrash();
  }

  async function emptyTrash() {
    const n = state.trash.length;
    if (readOnly() || !window.confirm(`Empty the trash? ${plural(n, 'entry', 'entries')} will be gone for good.`)) return;
    await act('empty the trash', `${API}/trash/empty`, {});
    loadTrash();
  }

  // ---------- operator actions ----------

  function loadActions() {
    return load('actions', `${API}/actions`, (list) => {
      state.actions = list.slice(0, MAX_ACTIONS);
      renderActions();
    });
  }

  function renderActions() {
    fill($('#actions'), state.actions.map((a) => h('li', { class: 'item action-item', data: { action: a.action } },
      h('div', { class: 'row small' },
        h('strong', { text: a.action }), h('code', { class: 'ellipsis', title: a.target, text: a.target }),
        h('span', { class: 'spacer' }), h('span', { class: 'muted', text: fmtTime(a.time) })),
      a.detail && h('div', { class: 'small pre muted', text: a.detail }),
      a.session_id && h('div', { class: 'small muted mono', title: a.session_id, text: `session ${short(a.session_id, 24)}` }))),
    'No operator actions yet.');
  }

  // ---------- wiring ----------

  function wire() {
    const click = (id, fn) => $(id).addEventListener('click', fn);
    $('#login-form').addEventListener('submit', submitLogin);
    click('#logout', logout);
    click('#status', () => setStatus(''));
    click('#run-close', closeRun);
    click('#archive-open', openArchive);
    click('#archive-next', archiveNext);
    click('#archive-prev', archivePrev);
    click('#terminal-close', closeTerminal);
    click('#takeover', () => takeover(true));
    click('#handback', () => takeover(false));
    click('#stop-process', stopProcess);
    click('#trash-empty', emptyTrash);
    click('#sessions-refresh', loadSessions);
    click('#processes-refresh', () => state.selected && loadProcesses(state.selected));
    click('#approvals-refresh', loadApprovals);
    click('#trash-refresh', loadTrash);
    click('#actions-refresh', loadActions);
    let frame = null;
    window.addEventListener('resize', () => {
      cancelAnimationFrame(frame);
      frame = requestAnimationFrame(fitTerminal);
    });
  }

  async function boot() {
    try {
      startApp(await getJSON(`${API}/me`));
    } catch (e) {
      if (e.status === 401) showLogin('');
      else {
        setStatus(`the console cannot start: ${e.message}; trying again in 5 s`);
        setTimeout(boot, 5000);
      }
    }
  }

  wire();
  boot();
})();
