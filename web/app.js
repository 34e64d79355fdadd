// app.js — the viewer's page: no framework, no network beyond this server. Every /api/ call
// carries the token from the URL. Previews: while a slider moves, one request per animation frame
// (drag subset, native sampling); on release the full BF set with the exact loss at the chosen
// upsampling. Each request has a sequence number and only the latest one's answer is drawn.

const token = new URLSearchParams(location.search).get('token') || '';
const $ = (id) => document.getElementById(id);
const SLIDERS = ['C10', 'C12', 'phi12', 'rotation'];
const HIGHER = ['C21', 'C23', 'C30', 'C32', 'C34', 'C41', 'C43', 'C45', 'C50', 'C52', 'C54', 'C56'];

// What tests (and curious people) can read: requests sent, images drawn.
const trace = { sent: [], drawn: [], lastLoss: null };
window.__ssb4d = trace;

let state = null;          // last /api/state
// Last preview sequence number sent. The server orders previews by it (a late older request is
// answered 409), so a reloaded page starts above the old one: from the clock.
let seq = Date.now();
let rafPending = false;
let lastImage = null;      // {data, w, h, view, upsample}
let rect = null;           // [r0, r1, c0, c1] drawn, scan positions
let polling = false;

async function api(path, body) {
  const opt = { headers: { 'X-SSB4D-Token': token } };
  if (body !== undefined) {
    opt.method = 'POST';
    opt.headers['Content-Type'] = 'application/json';
    opt.body = JSON.stringify(body);
  }
  return fetch(path, opt);
}

async function apiJSON(path, body) {
  const r = await api(path, body);
  const j = await r.json().catch(() => ({ error: 'bad answer' }));
  if (!r.ok) throw new Error(j.error || r.statusText);
  return j;
}

function setStatus(msg, err) {
  $('status').textContent = msg;
  $('status').className = err ? 'error' : '';
}

// ---- parameters -----------------------------------------------------------------------------

function num(id) { return Number($(id).value); }

// The exact values of the four sliders: a range input snaps to its step, so a fitted value lives
// here (and is what previews and Save use) until the person moves the slider or types a number.
const exact = { C10: 0, C12: 0, phi12: 0, rotation: 0 };

function params() {
  const p = { C10_nm: exact.C10, C12_nm: exact.C12, phi12_deg: exact.phi12, rotation_deg: exact.rotation };
  const ab = {};
  for (const n of HIGHER) {
    ab[n + '_nm'] = num('h_' + n);
    if (document.getElementById('h_phi' + n)) ab['phi' + n.slice(1) + '_deg'] = num('h_phi' + n);
  }
  p.aberr = ab;
  p.tilt_mrad = [num('tilt_r'), num('tilt_c')];
  p.thickness_nm = Math.max(0, num('thickness'));
  return p;
}

// A value onto a slider, its range widened to hold it.
function setSlider(id, v) {
  const s = $(id);
  const lo = Number(s.min), hi = Number(s.max);
  if (v < lo) s.min = String(Math.floor(v - 0.2 * Math.abs(v) - 1));
  if (v > hi) s.max = String(Math.ceil(v + 0.2 * Math.abs(v) + 1));
  s.value = String(v);
  exact[id] = v;
  $(id + '_num').value = String(+v.toFixed(4));
}

function fromCurrent(cur) {
  setSlider('C10', cur.C10_nm);
  setSlider('C12', cur.C12_nm);
  setSlider('phi12', cur.phi12_deg);
  setSlider('rotation', cur.rotation_deg);
  for (const n of HIGHER) {
    $('h_' + n).value = cur.aberr[n + '_nm'] ?? 0;
    const ph = document.getElementById('h_phi' + n);
    if (ph) ph.value = cur.aberr['phi' + n.slice(1) + '_deg'] ?? 0;
  }
  $('tilt_r').value = cur.tilt_mrad[0];
  $('tilt_c').value = cur.tilt_mrad[1];
  $('thickness').value = cur.thickness_nm;
}

// ---- previews -------------------------------------------------------------------------------

async function preview(release) {
  const my = ++seq;
  const view = $('view').value;
  const body = Object.assign(params(), {
    upsample: release ? Number($('upsample').value) : 1,
    subset: release ? 0 : Math.max(0, Math.floor(num('subset'))),
    estimator: $('estimator').value,
    want_loss: !!release,
    view,
    seq: my,
  });
  trace.sent.push({ seq: my, release: !!release });
  trace.lastBody = body;
  if (trace.sent.length > 5000) trace.sent.splice(0, 1000); // a long session stays small
  const t0 = performance.now();
  let r;
  try { r = await api('/api/preview', body); } catch (e) { setStatus('connection lost: ' + e.message, true); return; }
  if (r.status === 409) return; // superseded by a newer request: nothing to draw
  if (!r.ok) {
    const j = await r.json().catch(() => ({}));
    if (my === seq) setStatus('preview: ' + (j.error || r.statusText), true);
    return;
  }
  const buf = await r.arrayBuffer();
  const got = Number(r.headers.get('X-Seq'));
  if (got !== my || my !== seq) return; // a stale answer is never drawn
  const w = Number(r.headers.get('X-Width')), h = Number(r.headers.get('X-Height'));
  lastImage = { data: new Float32Array(buf), w, h, view, upsample: body.upsample };
  draw();
  trace.drawn.push({ seq: my, latest: seq, release: !!release });
  if (trace.drawn.length > 5000) trace.drawn.splice(0, 1000);
  const ms = performance.now() - t0;
  $('reqtime').textContent = `${ms.toFixed(0)} ms (server ${(1000 * Number(r.headers.get('X-Seconds'))).toFixed(0)} ms)`;
  if (release) {
    const loss = Number(r.headers.get('X-Loss'));
    trace.lastLoss = loss;
    $('loss').textContent = loss.toPrecision(8);
    $('loss').dataset.loss = r.headers.get('X-Loss');
    $('loss').dataset.seq = String(my);
    setStatus(`${w}×${h} at ${body.upsample}×, full BF set`);
    refreshMemory(); // once per release, not per drag frame
  } else {
    setStatus(`dragging: ${w}×${h}, subset ${body.subset || 'all'}`);
  }
}

function schedulePreview() {
  if (rafPending) return;
  rafPending = true;
  requestAnimationFrame(() => { rafPending = false; preview(false); });
}

// ---- drawing --------------------------------------------------------------------------------

const MAPS = {
  gray: [[0, 0, 0], [255, 255, 255]],
  viridis: [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]],
  magma: [[0, 0, 4], [81, 18, 124], [183, 55, 121], [252, 137, 97], [252, 253, 191]],
};

function lut(name) {
  const stops = MAPS[name] || MAPS.gray, out = new Uint8Array(256 * 3);
  for (let i = 0; i < 256; i++) {
    const x = i / 255 * (stops.length - 1), k = Math.min(stops.length - 2, Math.floor(x)), f = x - k;
    for (let c = 0; c < 3; c++) out[3 * i + c] = Math.round(stops[k][c] * (1 - f) + stops[k + 1][c] * f);
  }
  return out;
}

function percentiles(a, plo, phi) {
  const step = Math.max(1, Math.floor(a.length / 65536)), s = [];
  for (let i = 0; i < a.length; i += step) if (Number.isFinite(a[i])) s.push(a[i]);
  s.sort((x, y) => x - y);
  if (!s.length) return [0, 1];
  const q = (p) => s[Math.min(s.length - 1, Math.max(0, Math.round(p / 100 * (s.length - 1))))];
  let lo = q(plo), hi = q(phi);
  if (!(hi > lo)) hi = lo + 1e-6;
  return [lo, hi];
}

function draw() {
  if (!lastImage) return;
  const { data, w, h, view } = lastImage;
  const cv = $('img');
  cv.width = w; cv.height = h;
  const flip = view === 'phase' && $('flip').checked ? -1 : 1;
  const vals = flip < 0 ? data.map((x) => -x) : data;
  const [lo, hi] = percentiles(vals, num('plo'), num('phi'));
  const L = lut($('cmap').value), im = cv.getContext('2d').createImageData(w, h);
  for (let i = 0; i < w * h; i++) {
    let t = (vals[i] - lo) / (hi - lo);
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    const k = Math.round(t * 255) * 3;
    im.data[4 * i] = L[k]; im.data[4 * i + 1] = L[k + 1]; im.data[4 * i + 2] = L[k + 2]; im.data[4 * i + 3] = 255;
  }
  cv.getContext('2d').putImageData(im, 0, 0);
  cv.dataset.seq = String(seq);
  drawOverlay();
}

function drawOverlay(drag) {
  const ov = $('overlay'), g = ov.getContext('2d');
  g.clearRect(0, 0, ov.width, ov.height);
  if (!state || !lastImage) return;
  const sr = state.shape[0], sc = state.shape[1];
  const r = drag || rect;
  if (r && lastImage.view !== 'fft') {
    g.strokeStyle = '#ffd23f'; g.lineWidth = 2;
    g.strokeRect(r[2] / sc * ov.width, r[0] / sr * ov.height, (r[3] - r[2]) / sc * ov.width, (r[1] - r[0]) / sr * ov.height);
  }
  if (lastImage.view !== 'fft' && state.calibration) { // scale bar: a round length near 1/5 of the width
    const widthA = sc * state.calibration.scan_step_A[1];
    let len = widthA / 5;
    const p = Math.pow(10, Math.floor(Math.log10(len)));
    len = [1, 2, 5, 10].map((m) => m * p).filter((x) => x <= len).pop() || p;
    const px = len / widthA * ov.width;
    g.fillStyle = '#fff';
    g.fillRect(ov.width - px - 16, ov.height - 24, px, 5);
    g.font = '13px sans-serif';
    g.fillText(len >= 10 ? `${len / 10} nm` : `${len} Å`, ov.width - px - 16, ov.height - 30);
  }
}

// Rectangle drawing on the overlay, in scan positions.
function scanPos(ev) {
  const ov = $('overlay'), b = ov.getBoundingClientRect();
  const fx = (ev.clientX - b.left) / b.width, fy = (ev.clientY - b.top) / b.height;
  return [Math.round(Math.min(1, Math.max(0, fy)) * state.shape[0]), Math.round(Math.min(1, Math.max(0, fx)) * state.shape[1])];
}

function setupRect() {
  let start = null;
  const ov = $('overlay');
  ov.addEventListener('mousedown', (e) => { if (state) start = scanPos(e); });
  ov.addEventListener('mousemove', (e) => {
    if (!start) return;
    const p = scanPos(e);
    drawOverlay([Math.min(start[0], p[0]), Math.max(start[0], p[0]), Math.min(start[1], p[1]), Math.max(start[1], p[1])]);
  });
  window.addEventListener('mouseup', (e) => {
    if (!start) return;
    const p = scanPos(e);
    const r = [Math.min(start[0], p[0]), Math.max(start[0], p[0]), Math.min(start[1], p[1]), Math.max(start[1], p[1])];
    start = null;
    rect = (r[1] - r[0] >= 1 && r[3] - r[2] >= 1) ? r : null;
    $('rect').textContent = rect ? `rows ${rect[0]}:${rect[1]}, cols ${rect[2]}:${rect[3]}` : 'whole field';
    drawOverlay();
  });
}

// ---- state, jobs ----------------------------------------------------------------------------

function fmtBytes(b) { return b >= 2 ** 30 ? (b / 2 ** 30).toFixed(2) + ' GiB' : (b / 2 ** 20).toFixed(0) + ' MiB'; }

function showMemory(m) {
  $('memory').textContent = `tracked ${fmtBytes(m.tracked)}, footprint ${fmtBytes(m.footprint)}, budget ${fmtBytes(m.budget)}`;
}

async function refreshMemory() {
  try { state = await apiJSON('/api/state'); showMemory(state.memory); } catch (e) { /* the next one will tell */ }
}

function showJob(s) {
  const busy = s.job.busy;
  $('progress').value = busy ? s.job.fraction : 0;
  $('jobname').textContent = busy ? `${s.job.name}${s.job.stage ? ': ' + s.job.stage : ''}` : (s.error ? 'error: ' + s.error : '');
  $('jobname').className = !busy && s.error ? 'error' : '';
  $('cancel').disabled = !busy;
  for (const id of ['fit', 'crop_refit', 'fit_regions', 'fit_tilt']) $(id).disabled = busy || !s.ready;
}

function showTrials(s) {
  const tb = $('trials').querySelector('tbody');
  tb.textContent = '';
  s.trials.forEach((t, i) => {
    const tr = document.createElement('tr');
    for (const v of [i + 1, t.C10_nm.toFixed(3), t.C12_nm.toFixed(3), t.phi12_deg.toFixed(2), t.objective.toPrecision(6)]) {
      const td = document.createElement('td'); td.textContent = v; tr.appendChild(td);
    }
    tr.addEventListener('click', () => {
      setSlider('C10', t.C10_nm); setSlider('C12', t.C12_nm); setSlider('phi12', t.phi12_deg);
      preview(true);
    });
    tb.appendChild(tr);
  });
}

// Polls /api/state every 250 ms while a job runs (never while idle), then calls done(state).
async function pollWhileBusy(done) {
  if (polling) return;
  polling = true;
  for (;;) {
    try { state = await apiJSON('/api/state'); } catch (e) { setStatus(e.message, true); }
    if (state) { showJob(state); showMemory(state.memory); }
    if (state && !state.job.busy) break;
    await new Promise((res) => setTimeout(res, 250));
  }
  polling = false;
  if (done) done(state);
}

function afterFit(s) {
  $('dataset').textContent = `${s.dataset} · ${s.shape.join('×')}`;
  showTrials(s);
  fromCurrent(s.current);
  if (s.fit.done) setStatus(`fit: C10 ${s.fit.result.C10_nm.toFixed(2)} nm, C12 ${s.fit.result.C12_nm.toFixed(2)} nm, φ12 ${s.fit.result.phi12_deg.toFixed(1)}°${s.fit.flip ? ', mirrored detector' : ''} ${s.fit.warning ? '(' + s.fit.warning + ')' : ''}`);
  $('fit').dataset.done = s.fit.done ? '1' : '0';
  document.body.dataset.ready = '1';
  preview(true);
}

async function runJob(path, body, onResult) {
  const p = apiJSON(path, body);
  setTimeout(() => pollWhileBusy(), 50);
  try {
    const j = await p;
    if (onResult) onResult(j);
  } catch (e) {
    setStatus(`${path.slice(5)}: ${e.message}`, true);
  }
  await pollWhileBusy();
}

function drawRegionMap(m) {
  const cv = $('regionmap'), g = cv.getContext('2d');
  g.clearRect(0, 0, cv.width, cv.height);
  const vals = m.cells.map((c) => c.C10_nm);
  const lo = Math.min(...vals), hi = Math.max(...vals);
  const L = lut('viridis');
  const [r0, r1, c0, c1] = m.rect;
  m.cells.forEach((c) => {
    const t = hi > lo ? (c.C10_nm - lo) / (hi - lo) : 0.5, k = Math.round(t * 255) * 3;
    g.fillStyle = `rgb(${L[k]},${L[k + 1]},${L[k + 2]})`;
    const x = (c.rect[2] - c0) / (c1 - c0) * cv.width, y = (c.rect[0] - r0) / (r1 - r0) * cv.height;
    const w = (c.rect[3] - c.rect[2]) / (c1 - c0) * cv.width, h = (c.rect[1] - c.rect[0]) / (r1 - r0) * cv.height;
    g.fillRect(x, y, w, h);
    g.fillStyle = t > 0.6 ? '#000' : '#fff';
    g.font = '12px sans-serif';
    g.fillText(`${c.C10_nm.toFixed(2)} nm`, x + 4, y + 16);
  });
  cv.dataset.cells = String(m.cells.length);
  $('maplegend').textContent = `C10 map: ${lo.toFixed(3)} nm (dark) … ${hi.toFixed(3)} nm (bright), ${m.rows}×${m.cols} regions`;
}

async function showCalibration() {
  try {
    const info = await apiJSON('/api/calibration');
    const r = await api('/api/calibration/mean');
    if (!r.ok) return;
    const a = new Float32Array(await r.arrayBuffer());
    const w = Number(r.headers.get('X-Width')), h = Number(r.headers.get('X-Height'));
    const off = document.createElement('canvas');
    off.width = w; off.height = h;
    const im = off.getContext('2d').createImageData(w, h);
    const logs = a.map((x) => Math.log1p(Math.max(0, x)));
    const [lo, hi] = percentiles(logs, 0.5, 99.9);
    for (let i = 0; i < w * h; i++) {
      const t = Math.min(1, Math.max(0, (logs[i] - lo) / (hi - lo))) * 255;
      im.data[4 * i] = im.data[4 * i + 1] = im.data[4 * i + 2] = t; im.data[4 * i + 3] = 255;
    }
    for (const f of info.flagged) { im.data[4 * f] = 255; im.data[4 * f + 1] = 0; im.data[4 * f + 2] = 0; }
    off.getContext('2d').putImageData(im, 0, 0);
    const cv = $('calview'), g = cv.getContext('2d');
    g.imageSmoothingEnabled = false;
    g.drawImage(off, 0, 0, cv.width, cv.height);
    const sx = cv.width / w, sy = cv.height / h;
    g.strokeStyle = '#4fc3f7'; g.lineWidth = 1.5;
    g.beginPath();
    g.ellipse((info.disk_centre_px[1] + 0.5) * sx, (info.disk_centre_px[0] + 0.5) * sy, info.disk_radius_px * sx, info.disk_radius_px * sy, 0, 0, 2 * Math.PI);
    g.stroke();
    $('calinfo').textContent = `disk centre (${info.disk_centre_px.map((x) => x.toFixed(2)).join(', ')}) px, radius ${info.disk_radius_px.toFixed(2)} px, ${info.flagged.length} flagged pixels (red)`;
  } catch (e) { $('calinfo').textContent = e.message; }
}

// ---- wiring ---------------------------------------------------------------------------------

function setup() {
  const hi = $('higher');
  for (const n of HIGHER) {
    const row = document.createElement('div'); row.className = 'row';
    const lab = document.createElement('label'); lab.textContent = n + ' (nm)'; row.appendChild(lab);
    const c = document.createElement('input'); c.type = 'number'; c.id = 'h_' + n; c.value = '0'; c.step = 'any'; row.appendChild(c);
    if (n[2] !== '0') {
      const p = document.createElement('input'); p.type = 'number'; p.id = 'h_phi' + n; p.value = '0'; p.step = 'any'; p.title = 'angle (°)';
      row.appendChild(p);
    }
    hi.appendChild(row);
  }
  for (const id of SLIDERS) {
    $(id).addEventListener('input', () => { exact[id] = Number($(id).value); $(id + '_num').value = $(id).value; schedulePreview(); });
    $(id).addEventListener('change', () => preview(true));
    $(id + '_num').addEventListener('change', () => { setSlider(id, Number($(id + '_num').value)); preview(true); });
  }
  for (const id of ['view', 'upsample', 'estimator']) $(id).addEventListener('change', () => preview(true));
  for (const id of ['cmap', 'plo', 'phi', 'flip']) $(id).addEventListener('change', draw);
  hi.addEventListener('change', () => preview(true));
  for (const id of ['tilt_r', 'tilt_c', 'thickness']) $(id).addEventListener('change', () => preview(true));
  $('cancel').addEventListener('click', () => api('/api/cancel', {}));
  $('fit').addEventListener('click', () => runJob('/api/fit', {}, () => {}).then(() => afterFit(state)));
  $('fit_tilt').addEventListener('click', () => runJob('/api/fit_tilt', {}, (j) => {
    setStatus(`tilt fit: (${j.tilt_mrad.map((x) => x.toFixed(2)).join(', ')}) mrad, ${j.thickness_nm.toFixed(1)} nm, gain ${j.gain.toFixed(3)}`);
  }).then(() => { fromCurrent(state.current); preview(true); }));
  $('reset').addEventListener('click', async () => {
    try { const s = await apiJSON('/api/reset', {}); state = s; fromCurrent(s.current); preview(true); } catch (e) { setStatus(e.message, true); }
  });
  $('save').addEventListener('click', async () => {
    try {
      await apiJSON('/api/apply', params()); // the values shown become the session's
      const j = await apiJSON('/api/save', { force: $('force').checked });
      $('saved').textContent = 'saved ' + j.path;
      $('saved').dataset.path = j.path;
      $('saved').className = '';
    } catch (e) { $('saved').textContent = e.message; $('saved').className = 'error'; }
  });
  $('crop_refit').addEventListener('click', () => {
    const r = rect || [0, state.shape[0], 0, state.shape[1]];
    runJob('/api/region', { rect: r }, (j) => {
      $('region_result').textContent = `C10 ${j.C10_nm.toFixed(2)} nm, C12 ${j.C12_nm.toFixed(2)} nm, φ12 ${j.phi12_deg.toFixed(1)}°, loss ${j.loss.toPrecision(6)}`;
      $('region_result').dataset.c10 = String(j.C10_nm);
      $('apply_region').disabled = false;
    });
  });
  $('apply_region').addEventListener('click', async () => {
    try { const s = await apiJSON('/api/apply', { region: true }); state = s; fromCurrent(s.current); preview(true); } catch (e) { setStatus(e.message, true); }
  });
  $('fit_regions').addEventListener('click', () => {
    const body = { rows: Math.floor(num('grid_rows')), cols: Math.floor(num('grid_cols')) };
    if (rect) body.rect = rect;
    runJob('/api/regions', body, drawRegionMap);
  });
  $('caldetails').addEventListener('toggle', () => { if ($('caldetails').open) showCalibration(); });
  setupRect();
}

setup();
pollWhileBusy(afterFit);
