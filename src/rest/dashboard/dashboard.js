// Flint dashboard. Plain JavaScript, no build step, no external resources: it polls the
// JobManager's REST API (docs/rest.md) every second and renders the pool, the Task Managers with
// their slots and the jobs with per-vertex progress. Changes (pool size, cancel) go through the
// same API; when the server asks for a token (401) the user is asked once per browser tab.
//
// Rendering is keyed: each Task Manager and each job is one element whose markup is replaced
// only when it changed, and keyboard focus and opened/closed vertex lists survive the updates.
// Every value from the server is escaped before it becomes markup.
(function () {
  'use strict';

  /** How long to wait between the end of one poll and the start of the next. */
  const POLL_MS = 1000;
  /** A request that takes longer than this counts as failed (the JobManager is unreachable). */
  const REQUEST_TIMEOUT_MS = 5000;
  /** Per-vertex details are fetched for this many of the newest jobs on each poll. */
  const DETAIL_LIMIT = 50;
  /** sessionStorage key of the bearer token: kept for this tab only, never in localStorage. */
  const TOKEN_KEY = 'flint.rest.token';

  /** Job states after which nothing changes any more (Flink's globally terminal states). */
  const JOB_ENDED = new Set(['FINISHED', 'FAILED', 'CANCELED']);
  /** Job states in which a cancel makes sense (CANCELLING is already on its way). */
  const JOB_CANCELLABLE = new Set(['CREATED', 'RUNNING', 'FAILING', 'RESTARTING']);
  /** Task (execution) states in the order a task goes through them, for bars and counts. */
  const TASK_STATES = ['FINISHED', 'RUNNING', 'DEPLOYING', 'SCHEDULED', 'CREATED',
    'CANCELING', 'CANCELED', 'FAILED'];
  /** Which task state stands for a vertex when its subtasks differ, most telling first. */
  const VERTEX_STATE_PRIORITY = ['FAILED', 'CANCELING', 'RUNNING', 'DEPLOYING', 'SCHEDULED',
    'CREATED', 'CANCELED', 'FINISHED'];

  const $ = (id) => document.getElementById(id);

  const ui = {
    /** Details of ended jobs, by id: they no longer change, so they are fetched once. */
    endedDetails: new Map(),
    /** Whether the user opened (true) or closed (false) a job's vertex list, by job id. */
    vertexListOpen: new Map(),
    /** The markup each keyed element shows, to skip unchanged ones. */
    shown: new WeakMap(),
    /** When the last poll succeeded (a Date), for the banner. */
    lastOk: null,
    /** The user typed into the pool-size field: stop filling it in from the server. */
    poolSizeEdited: false,
    /** The last designated pool size the server reported. */
    designated: null,
    /** Job names by id, for the confirmation and messages. */
    jobNames: new Map(),
  };

  // ---------------------------------------------------------------------------------------
  // HTTP

  /** A failed request: `status` is the HTTP status, or 0 when there was no answer at all. */
  class RequestError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  function storedToken() {
    try {
      return sessionStorage.getItem(TOKEN_KEY);
    } catch (_) {
      return null;
    }
  }

  /**
   * A token given in the page's address (`/#token=...`, as `flint jobmanager`'s user can build
   * from its token file): kept for this tab, and removed from the address bar at once so it is
   * neither bookmarked nor shown. A fragment never reaches the server.
   */
  function takeTokenFromAddress() {
    const match = /^#token=(.+)$/.exec(window.location.hash);
    if (!match) return;
    storeToken(decodeURIComponent(match[1]));
    history.replaceState(null, '', window.location.pathname + window.location.search);
  }

  function storeToken(token) {
    try {
      if (token === null) sessionStorage.removeItem(TOKEN_KEY);
      else sessionStorage.setItem(TOKEN_KEY, token);
    } catch (_) {
      // Storage disabled: the token is asked for again next time.
    }
  }

  /**
   * One request to the REST API. Resolves with the parsed JSON answer; rejects with a
   * RequestError carrying the server's JSON `message` for an error status.
   */
  async function request(method, path, body) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
    const headers = { Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const token = storedToken();
    if (token) headers.Authorization = 'Bearer ' + token;
    let response;
    let text;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: controller.signal,
        cache: 'no-store',
        credentials: 'same-origin',
      });
      text = await response.text();
    } catch (error) {
      const why = error && error.name === 'AbortError'
        ? 'no answer within ' + REQUEST_TIMEOUT_MS / 1000 + ' s'
        : 'connection failed';
      throw new RequestError(0, why);
    } finally {
      clearTimeout(timer);
    }
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (_) {
        data = null;
      }
    }
    if (!response.ok) {
      const message = data && typeof data.message === 'string'
        ? data.message
        : (response.status + ' ' + response.statusText).trim();
      throw new RequestError(response.status, message);
    }
    return data;
  }

  /**
   * A request with the token. On 401 the user is asked for the token (the server's message
   * says why) and the request is sent again with it, until it is accepted or the user gives up.
   */
  async function change(method, path, body) {
    for (;;) {
      try {
        return await request(method, path, body);
      } catch (error) {
        if (!(error instanceof RequestError) || error.status !== 401) throw error;
        // A stored token that was refused is wrong: forget it before asking for another.
        storeToken(null);
        const token = await askForToken(error.message);
        if (token === null) throw new RequestError(401, error.message + ' (no token given)');
        storeToken(token);
      }
    }
  }

  // ---------------------------------------------------------------------------------------
  // Dialogs

  /** Opens a modal dialog and resolves with the value of the button that closed it ('' on Esc). */
  function runDialog(dialog, focus) {
    return new Promise((resolve) => {
      dialog.returnValue = '';
      dialog.addEventListener('close', () => resolve(dialog.returnValue), { once: true });
      dialog.showModal();
      if (focus) focus.focus();
    });
  }

  /** The open token prompt, shared by changes refused at the same time. */
  let tokenPrompt = null;

  /** Asks for the bearer token; resolves with it, or null if the user cancels. */
  function askForToken(reason) {
    if (!tokenPrompt) {
      tokenPrompt = promptForToken(reason).finally(() => {
        tokenPrompt = null;
      });
    }
    return tokenPrompt;
  }

  async function promptForToken(reason) {
    const input = $('token-input');
    input.value = '';
    $('token-reason').textContent = 'The JobManager answered: ' + reason;
    const choice = await runDialog($('token-dialog'), input);
    const token = input.value.trim();
    input.value = '';
    return choice === 'use' && token !== '' ? token : null;
  }

  /** Asks whether to cancel a job; resolves true if confirmed. */
  async function confirmCancel(id, name) {
    $('confirm-text').textContent =
      'Cancel job "' + name + '" (' + id + ')? Its running tasks are stopped and it ends CANCELED.';
    const choice = await runDialog($('confirm-dialog'), null);
    return choice === 'cancel';
  }

  // ---------------------------------------------------------------------------------------
  // Formatting

  function esc(value) {
    return String(value).replace(/[&<>"']/g, (c) => ({
      '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
    }[c]));
  }

  const pad = (n, width) => String(n).padStart(width || 2, '0');

  /** A wall-clock time: HH:MM:SS today, with the date otherwise (no locale surprises). */
  function formatTime(ms) {
    if (typeof ms !== 'number') return '–';
    const d = new Date(ms);
    const now = new Date();
    const time = pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
    if (d.toDateString() === now.toDateString()) return time;
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + time;
  }

  function formatDuration(ms) {
    if (typeof ms !== 'number' || ms < 0) return '–';
    if (ms < 1000) return Math.round(ms) + ' ms';
    const s = Math.floor(ms / 1000);
    if (s < 60) return (ms / 1000).toFixed(s < 10 ? 1 : 0) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + pad(s % 60) + ' s';
    return Math.floor(m / 60) + ' h ' + pad(m % 60) + ' min';
  }

  /** A size in B, KiB, MiB or GiB; null when unknown (the API reports 0 for memory then). */
  function formatBytes(bytes) {
    if (typeof bytes !== 'number' || bytes <= 0) return null;
    if (bytes < 1024) return bytes + ' B';
    if (bytes < 1024 * 1024) return (bytes / 1024).toFixed(1) + ' KiB';
    const gib = bytes / (1024 * 1024 * 1024);
    return gib >= 1 ? gib.toFixed(1) + ' GiB' : Math.round(bytes / (1024 * 1024)) + ' MiB';
  }

  const plural = (n, one, many) => n + ' ' + (n === 1 ? one : many || one + 's');

  function badge(state) {
    const s = String(state || 'UNKNOWN');
    return '<span class="badge st-' + esc(s) + '">' + esc(s) + '</span>';
  }

  /**
   * A stacked progress bar of task counts (`counts`: state -> number). Widths go in data-w and
   * are applied by applyWidths, so the page needs no inline styles (the CSP forbids them).
   */
  function taskBar(counts, total, label) {
    let segments = '';
    for (const s of TASK_STATES) {
      const n = counts[s] || 0;
      if (n > 0 && total > 0) {
        segments += '<span class="b-' + s + '" data-w="' + (100 * n / total).toFixed(3) +
          '" title="' + esc(s + ': ' + n) + '"></span>';
      }
    }
    return '<div class="bar" role="img" aria-label="' + esc(label) + '">' + segments + '</div>';
  }

  function applyWidths(root) {
    for (const el of root.querySelectorAll('[data-w]')) el.style.width = el.dataset.w + '%';
    for (const el of root.querySelectorAll('[data-left]')) el.style.left = el.dataset.left + '%';
  }

  function setText(id, value) {
    const el = $(id);
    const text = String(value);
    if (el.textContent !== text) el.textContent = text;
  }

  // ---------------------------------------------------------------------------------------
  // Keyed rendering

  /**
   * Makes the keyed children (`data-key`) of `container` match `items` ({key, html, cls}) in
   * order: new ones are created as `tag`, gone ones removed, changed ones re-rendered. Other
   * children (a table's thead) stay first. Focus on an element with `data-focus` is restored.
   */
  function reconcile(container, tag, items) {
    const active = document.activeElement;
    const focusKey = active && container.contains(active) ? active.dataset.focus : undefined;
    const existing = new Map();
    for (const el of container.children) {
      if (el.dataset.key !== undefined) existing.set(el.dataset.key, el);
    }
    const nextKeyed = (el) => {
      while (el && el.dataset.key === undefined) el = el.nextElementSibling;
      return el;
    };
    let cursor = nextKeyed(container.firstElementChild);
    for (const item of items) {
      let el = existing.get(item.key);
      if (el) {
        existing.delete(item.key);
      } else {
        el = document.createElement(tag);
        el.dataset.key = item.key;
      }
      if (el.className !== item.cls) el.className = item.cls;
      if (ui.shown.get(el) !== item.html) {
        el.innerHTML = item.html;
        ui.shown.set(el, item.html);
        applyWidths(el);
      }
      if (el === cursor) {
        cursor = nextKeyed(cursor.nextElementSibling);
      } else {
        container.insertBefore(el, cursor);
      }
    }
    for (const el of existing.values()) el.remove();
    if (focusKey !== undefined && !container.contains(document.activeElement)) {
      for (const el of container.querySelectorAll('[data-focus]')) {
        if (el.dataset.focus === focusKey) {
          el.focus();
          break;
        }
      }
    }
  }

  // ---------------------------------------------------------------------------------------
  // Overview and pool

  function renderOverview(o) {
    const pool = o.pool || {};
    setText('version', o['flink-version'] || '–');
    setText('total-taskmanagers', o.taskmanagers);
    setText('total-slots-available', o['slots-available']);
    setText('total-slots', o['slots-total']);
    setText('total-jobs-running', o['jobs-running']);
    setText('total-jobs-finished', o['jobs-finished']);
    setText('total-jobs-cancelled', o['jobs-cancelled']);
    setText('total-jobs-failed', o['jobs-failed']);

    const designated = pool.designated || 0;
    const target = typeof pool.target === 'number' ? pool.target : designated;
    const started = pool.started || 0;
    const registering = pool['pending-registration'] || 0;
    const requested = pool['pending-requests'] || 0;
    setText('pool-designated', designated);
    setText('pool-demand', pool.demand || 0);
    setText('pool-target', target);
    setText('pool-started', started);
    setText('pool-pending-registration', registering);
    setText('pool-pending-requests', requested);
    setText('pool-start-failures', pool['start-failures'] || 0);
    setText('pool-max', pool.max);
    setText('pool-size-max', pool.max);
    ui.designated = designated;

    const input = $('pool-size-input');
    if (!ui.poolSizeEdited && document.activeElement !== input) input.value = String(designated);

    // The bar is as long as the larger of the target and what exists or is on its way.
    const units = Math.max(target, started + registering + requested, 1);
    const segment = (n, cls, what) => n > 0
      ? '<span class="seg ' + cls + '" data-w="' + (100 * n / units).toFixed(3) + '" title="' +
        esc(n + ' ' + what) + '"></span>'
      : '';
    const html = segment(started, 'seg-started', 'started') +
      segment(registering, 'seg-registering', 'pending registration') +
      segment(requested, 'seg-requested', 'pending requests') +
      '<span class="target' + (target * 2 < units ? ' low' : '') + '" data-left="' +
      (100 * target / units).toFixed(3) + '"><span>target ' + esc(target) +
      (target !== designated ? ' (designated ' + esc(designated) + ')' : '') +
      '</span></span>';
    const bar = $('pool-bar');
    if (ui.shown.get(bar) !== html) {
      bar.innerHTML = html;
      ui.shown.set(bar, html);
      applyWidths(bar);
    }
    bar.setAttribute('aria-label', 'Pool: target ' + target + ', ' + designated + ' designated, ' + started +
      ' started, ' + registering + ' pending registration, ' + requested + ' pending requests');
  }

  // ---------------------------------------------------------------------------------------
  // Task Managers

  /** "source (1/2)": Flink's way of naming a subtask, when the vertex's parallelism is known. */
  function subtaskName(task, detailsById) {
    const details = detailsById.get(task['job-id']);
    const vertex = details && details.vertices ? details.vertices[task.vertex] : undefined;
    const name = task['vertex-name'] || (vertex && vertex.name) || 'vertex ' + task.vertex;
    if (vertex && typeof vertex.parallelism === 'number') {
      return name + ' (' + (task.subtask + 1) + '/' + vertex.parallelism + ')';
    }
    return name + ' #' + task.subtask;
  }

  function taskManagerHtml(tm, detailsById) {
    const total = tm['slots-number'] || 0;
    const free = typeof tm['free-slots'] === 'number'
      ? tm['free-slots']
      : Math.max(total - (tm.slots || []).length, 0);
    const meta = [esc(tm.address || '')];
    const hw = tm.hardware || {};
    if (typeof hw['cpu-cores'] === 'number') meta.push(esc(plural(hw['cpu-cores'], 'core')));
    const memory = formatBytes(hw['physical-memory']);
    if (memory) meta.push(esc(memory));
    const fingerprint = tm.fingerprint || {};
    if (fingerprint.build) meta.push('build ' + esc(fingerprint.build));
    const programs = (fingerprint.operators || [])
      .filter(function (op) { return op.indexOf('program:') === 0; })
      .map(function (op) { return op.slice('program:'.length).split('@')[0]; });
    if (programs.length) meta.push('programs ' + esc(programs.join(', ')));
    if (typeof tm['time-since-last-heartbeat'] === 'number') {
      meta.push('heartbeat ' + esc(formatDuration(tm['time-since-last-heartbeat'])) + ' ago');
    }
    const registered = typeof tm['registered-at'] === 'number'
      ? ' title="registered at ' + esc(formatTime(tm['registered-at'])) + '"'
      : '';

    let slots = '';
    let n = 0;
    for (const slot of tm.slots || []) {
      n += 1;
      const tasks = slot.tasks || [];
      let body = '';
      for (const task of tasks) {
        const jobName = ui.jobNames.get(task['job-id']) || 'job';
        // `state` is null once the JobManager no longer keeps the job.
        body += '<div class="slot-task">' + badge(task.state || 'UNKNOWN') + '<span>' +
          esc(subtaskName(task, detailsById)) + '</span>' +
          (task.attempt > 0 ? '<span class="count">attempt ' + esc(task.attempt) + '</span>' : '') +
          '<span class="job-ref">' + esc(jobName) + ' <span class="mono" title="' +
          esc(task['job-id']) + '">' + esc(String(task['job-id']).slice(0, 8)) + '</span></span></div>';
      }
      if (!tasks.length) body = '<div class="slot-task">allocated, no task deployed yet</div>';
      slots += '<li class="slot"><div class="slot-title">Slot ' + n + ' · used by ' +
        esc(plural(tasks.length, 'task')) + '</div>' + body + '</li>';
    }
    for (let i = 0; i < free; i += 1) {
      n += 1;
      slots += '<li class="slot free"><span class="slot-title">Slot ' + n + '</span> · free</li>';
    }
    return '<div class="tm-head"><h3 class="mono"' + registered + '>' + esc(tm.id) + '</h3><span class="tm-free">' +
      esc(free + ' of ' + plural(total, 'slot') + ' free') + '</span></div>' +
      '<p class="tm-meta">' + meta.join(' · ') + '</p>' +
      '<ul class="slots" aria-label="Slots of ' + esc(tm.id) + '">' + slots + '</ul>';
  }

  function renderTaskManagers(tms, detailsById) {
    const slotsTotal = tms.reduce((sum, tm) => sum + (tm['slots-number'] || 0), 0);
    const slotsFree = tms.reduce((sum, tm) => sum + (tm['free-slots'] || 0), 0);
    setText('taskmanagers-note', plural(tms.length, 'registered Task Manager') + ' · ' +
      plural(slotsTotal, 'slot') + ', ' + slotsFree + ' free');
    $('taskmanagers-empty').hidden = tms.length > 0;
    reconcile($('taskmanager-list'), 'article', tms.map((tm) => ({
      key: String(tm.id),
      cls: 'tm',
      html: taskManagerHtml(tm, detailsById),
    })));
  }

  // ---------------------------------------------------------------------------------------
  // Jobs

  function vertexState(counts) {
    for (const s of VERTEX_STATE_PRIORITY) if ((counts[s] || 0) > 0) return s;
    return 'CREATED';
  }

  function vertexRows(details) {
    let rows = '';
    for (const v of details.vertices || []) {
      const counts = v.tasks || {};
      const total = v.parallelism || 0;
      const finished = counts.FINISHED || 0;
      let countList = '';
      for (const s of TASK_STATES) {
        if ((counts[s] || 0) > 0) countList += '<span class="count">' + esc(s) + ' ' + counts[s] + '</span>';
      }
      const restarts = (v.subtasks || []).reduce((m, t) => Math.max(m, t.attempt || 0), 0);
      // Backpressure, as Flink's web UI marks it: the vertex's worst subtask, per second.
      const io = v.metrics || {};
      const level = io['backpressure-level'] || 'ok';
      const pressure = io.backPressuredTimeMsPerSecond || 0;
      if (level !== 'ok') {
        countList += '<span class="count backpressure backpressure-' + esc(level) +
          '" title="Waits for room downstream ' + esc(pressure) +
          ' ms per second: its consumers are the bottleneck">backpressured (' + esc(level) + ') ' +
          esc(pressure) + ' ms/s</span>';
      }
      if ((io['records-in'] || 0) + (io['records-out'] || 0) > 0) {
        countList += '<span class="count">records in ' + esc(io['records-in'] || 0) + ' / out ' +
          esc(io['records-out'] || 0) + '</span>';
      }
      rows += '<tr><td>' + esc(v.name) + '</td><td class="mono">' + esc(v.operator || '') +
        '</td><td class="num">' + esc(total) + '</td><td>' + badge(vertexState(counts)) +
        '</td><td><div class="progress">' +
        taskBar(counts, total, v.name + ': ' + finished + ' of ' + total + ' subtasks finished') +
        '<span class="progress-text">' + finished + ' / ' + total + '</span></div></td><td><div class="counts">' +
        countList + (restarts > 0 ? '<span class="count">attempt ' + restarts + '</span>' : '') +
        '</div></td></tr>';
    }
    return rows;
  }

  function jobHtml(job, details) {
    const id = String(job.id);
    const state = (details && details.state) || job.state;
    const finished = (details && details['tasks-finished']) ?? job['tasks-finished'] ?? 0;
    const total = (details && details['tasks-total']) ?? job['tasks-total'] ?? 0;
    const start = (details && details['start-time']) ?? job['start-time'];
    let duration = details ? details.duration : null;
    if (typeof duration !== 'number' && typeof start === 'number' && !JOB_ENDED.has(state)) {
      duration = Math.max(Date.now() - start, 0);
    }

    // The job's bar adds up its vertices' task states; without details, finished vs the rest.
    const counts = {};
    if (details && details.vertices) {
      for (const v of details.vertices) {
        for (const s of TASK_STATES) counts[s] = (counts[s] || 0) + ((v.tasks || {})[s] || 0);
      }
    } else {
      counts.FINISHED = finished;
      counts.CREATED = Math.max(total - finished, 0);
    }
    const restarts = details && details.restarts > 0
      ? ' <span class="count">' + esc(plural(details.restarts, 'restart')) + '</span>'
      : '';
    const cancel = JOB_CANCELLABLE.has(state)
      ? '<button type="button" class="button danger small" data-action="cancel" data-job="' +
        esc(id) + '" data-focus="cancel-' + esc(id) + '" aria-label="' +
        esc('Cancel job ' + job.name + ' (' + id + ')') + '">Cancel</button>'
      : '';

    let html = '<tr class="job-row"><td><span class="job-name">' + esc(job.name) +
      '</span><span class="job-id mono">' + esc(id) + '</span></td><td>' + badge(state) + restarts +
      '</td><td class="num">' + esc(formatTime(start)) + '</td><td class="num">' +
      esc(formatDuration(duration)) + '</td><td><div class="progress">' +
      taskBar(counts, total, finished + ' of ' + total + ' tasks finished') +
      '<span class="progress-text">' + esc(finished) + ' / ' + esc(total) + '</span></div></td>' +
      '<td class="actions">' + cancel + '</td></tr>';

    if (details) {
      // A job that restarts shows why (its latest root cause), until it ends with a failure
      // of its own: its subtasks show only their new attempts.
      const causes = (details.exceptions || []).filter((e) => e['root-cause']);
      const latest = causes[causes.length - 1];
      const of = latest && (details.vertices || []).find((v) => v.name === latest.vertex);
      const failure = details.failure
        ? '<p class="failure">Failure: ' + esc(details.failure) + '</p>'
        : latest && !JOB_ENDED.has(state)
          ? '<p class="failure restart-cause">Restarted after: ' + esc(latest.vertex + ' (' +
            (latest.subtask + 1) + (of ? '/' + of.parallelism : '') + '), attempt ' + latest.attempt + ': ' + latest.exception) +
            '</p>'
          : '';
      const shipped = (details.artifacts || []).map((a) =>
        '<li class="artifact" title="' + esc('sha256 ' + a.digest) + '"><span class="mono">' +
        esc(a.name) + '</span> ' + esc(formatBytes(a.size) || '0 B') +
        (a.executable ? ' · executable' : '') + ' <span class="digest mono">' +
        esc(String(a.digest).slice(0, 12)) + '</span></li>');
      const artifacts = shipped.length
        ? '<div class="artifacts">' + esc(plural(shipped.length, 'artifact')) +
          ': <ul class="artifact-list">' + shipped.join('') + '</ul></div>'
        : '';
      const remembered = ui.vertexListOpen.get(id);
      const open = remembered === undefined ? !JOB_ENDED.has(state) : remembered;
      const vertices = details.vertices || [];
      html += '<tr class="vertices-row"><td colspan="6">' + failure + artifacts +
        '<details class="vertex-details" data-job="' + esc(id) + '"' + (open ? ' open' : '') +
        '><summary data-focus="vertices-' + esc(id) + '">' + esc(plural(vertices.length, 'vertex', 'vertices')) +
        '</summary><table class="vertices"><thead><tr><th scope="col">Vertex</th>' +
        '<th scope="col">Operator</th><th scope="col">Parallelism</th><th scope="col">State</th>' +
        '<th scope="col">Subtasks finished</th><th scope="col">Subtask states</th></tr></thead><tbody>' +
        vertexRows(details) + '</tbody></table></details></td></tr>';
    }
    return { key: id, cls: JOB_ENDED.has(state) ? 'ended' : 'active', html };
  }

  function renderJobs(jobs, detailsById) {
    $('jobs-empty').hidden = jobs.length > 0;
    $('job-table').hidden = jobs.length === 0;
    reconcile($('job-table'), 'tbody', jobs.map((job) => jobHtml(job, detailsById.get(String(job.id)))));
  }

  /** The details of the newest jobs: ended ones from the cache, the others asked for afresh. */
  async function fetchDetails(jobs) {
    const byId = new Map();
    const wanted = jobs.slice(0, DETAIL_LIMIT);
    await Promise.all(wanted.map(async (job) => {
      const id = String(job.id);
      const cached = ui.endedDetails.get(id);
      if (cached && cached.state === job.state) {
        byId.set(id, cached);
        return;
      }
      try {
        const details = await change('GET', '/jobs/' + encodeURIComponent(id));
        byId.set(id, details);
        if (JOB_ENDED.has(details.state)) ui.endedDetails.set(id, details);
      } catch (error) {
        // A job that vanished between the list and this request is simply not detailed.
        if (!(error instanceof RequestError) || error.status !== 404) throw error;
      }
    }));
    const listed = new Set(jobs.map((job) => String(job.id)));
    for (const id of ui.endedDetails.keys()) if (!listed.has(id)) ui.endedDetails.delete(id);
    for (const id of ui.vertexListOpen.keys()) if (!listed.has(id)) ui.vertexListOpen.delete(id);
    return byId;
  }

  // ---------------------------------------------------------------------------------------
  // Polling

  let timer = null;
  let polling = false;
  let pollAgain = false;

  function connected() {
    ui.lastOk = new Date();
    $('banner').hidden = true;
    $('main').classList.remove('stale');
    const live = $('live');
    live.className = 'live ok';
    // Only the state is a live region: the time changes every second and is not announced.
    setText('live-text', 'Live');
    setText('live-updated', '· updated ' + formatTime(ui.lastOk.getTime()));
  }

  function disconnected(error) {
    $('banner').hidden = false;
    setText('banner-detail', error.status
      ? 'It answered ' + error.status + ': ' + error.message + '.'
      : 'The request failed: ' + error.message + '.');
    setText('banner-since', ui.lastOk ? formatTime(ui.lastOk.getTime()) : 'page load (no answer yet)');
    $('main').classList.add('stale');
    $('live').className = 'live down';
    setText('live-text', 'JobManager unreachable');
    setText('live-updated', '');
  }

  async function poll() {
    if (polling) {
      pollAgain = true;
      return;
    }
    polling = true;
    clearTimeout(timer);
    try {
      const [overview, tms, list] = await Promise.all([
        change('GET', '/overview'),
        change('GET', '/taskmanagers'),
        change('GET', '/jobs'),
      ]);
      // The API lists jobs oldest first; the page shows the newest first.
      const jobs = (list.jobs || []).slice().reverse();
      ui.jobNames = new Map(jobs.map((job) => [String(job.id), job.name]));
      const details = await fetchDetails(jobs);
      renderOverview(overview);
      renderTaskManagers(tms.taskmanagers || [], details);
      renderJobs(jobs, details);
      connected();
    } catch (error) {
      if (!(error instanceof RequestError)) {
        console.error(error);
        error = new RequestError(0, 'the page could not show the answer (' + error.message + ')');
      }
      disconnected(error);
    } finally {
      polling = false;
      timer = setTimeout(poll, pollAgain ? 0 : POLL_MS);
      pollAgain = false;
    }
  }

  // ---------------------------------------------------------------------------------------
  // Actions

  function showMessage(id, kind, text) {
    const el = $(id);
    el.className = 'message ' + kind;
    el.textContent = text;
  }

  async function setPoolSize(event) {
    event.preventDefault();
    const input = $('pool-size-input');
    const button = $('pool-size-submit');
    const size = Number(input.value);
    button.disabled = true;
    showMessage('pool-message', '', 'Setting the pool size to ' + size + '…');
    try {
      const answer = await change('PUT', '/cluster/pool-size', { size });
      ui.poolSizeEdited = false;
      showMessage('pool-message', 'ok', 'Pool size set to ' + answer.size + '.');
      poll();
    } catch (error) {
      showMessage('pool-message', 'error', 'Not changed: ' + error.message +
        (error.status ? ' (HTTP ' + error.status + ')' : ''));
    } finally {
      button.disabled = false;
    }
  }

  async function cancelJob(button) {
    const id = button.dataset.job;
    const name = ui.jobNames.get(id) || id;
    if (!(await confirmCancel(id, name))) return;
    button.disabled = true;
    try {
      const answer = await change('DELETE', '/jobs/' + encodeURIComponent(id));
      showMessage('jobs-message', 'ok', 'Cancelling job "' + name + '" (' + id + '): ' +
        ((answer && answer.state) || 'requested') + '.');
      poll();
    } catch (error) {
      button.disabled = false;
      showMessage('jobs-message', 'error', 'Job "' + name + '" was not cancelled: ' +
        error.message + (error.status ? ' (HTTP ' + error.status + ')' : ''));
    }
  }

  function start() {
    takeTokenFromAddress();
    $('pool-form').addEventListener('submit', setPoolSize);
    $('pool-size-input').addEventListener('input', () => {
      ui.poolSizeEdited = true;
    });
    $('job-table').addEventListener('click', (event) => {
      const button = event.target.closest('button[data-action="cancel"]');
      if (button && !button.disabled) cancelJob(button);
    });
    // 'toggle' does not bubble: listen in the capture phase to remember the user's choice.
    $('job-table').addEventListener('toggle', (event) => {
      const details = event.target;
      if (details.matches && details.matches('details.vertex-details')) {
        ui.vertexListOpen.set(details.dataset.job, details.open);
      }
    }, true);
    poll();
  }

  start();
}());
