// app.js — the viewer's page: no framework, no network beyond this server, and only RELATIVE URLs
// (the page may live under a prefix: ssb4d view --base-url PREFIX serves it at PREFIX/ and the API
// at PREFIX/api/). Every api/ call carries the token from the URL.
//
// Previews: while a slider moves, one request per animation frame (drag subset, native sampling);
// on release the full BF set with the exact loss at the chosen upsampling. Each request carries a
// sequence number. The server runs the running preview to its end and replaces only a queued one
// (answered 204 with X-Superseded: nothing to draw, not an error), so the page draws EVERY
// finished preview newer than the image on screen: under load the image keeps moving, and a late
// drag answer is never drawn over a newer release's image.

const token = new URLSearchParams(location.search).get('token') || '';
const $ = (id) => document.getElementById(id);
const SLIDERS = ['C10', 'C12', 'phi12', 'rotation'];
const HIGHER = ['C21', 'C23', 'C30', 'C32', 'C34', 'C41', 'C43', 'C45', 'C50', 'C52', 'C54', 'C56'];
// The virtual images (api/virtual?kind=…): scan-sized, independent of the aberrations.
const VIRTUAL = {
  bf: { label: 'virtual BF', unit: 'counts' },
  adf: { label: 'virtual ADF', unit: 'counts' },
  com_x: { label: 'CoM x', unit: 'mrad' },
  com_y: { label: 'CoM y', unit: 'mrad' },
  idpc: { label: 'iDPC', unit: 'rad' },
};
const UNITS = { phase: 'rad', amplitude: 'a.u.', fft: 'log(1+|F|)' };
const START_STAGES = ['calibrate', 'G build', 'fit'];

// What tests (and curious people) can read: requests sent, answers, images drawn (with the time
// drawn, performance.now(), so that gaps between images can be measured).
// stale: answers whose body finished after a newer image was drawn (two connections' bodies
// can complete out of order on a loaded machine), so not drawn.
const trace = { sent: [], answers: [], drawn: [], stale: [], lastLoss: null };
window.__ssb4d = trace;

let state = null;          // last api/state
// Last request sequence number sent. The server orders previews by it (a late older request is
// answered 204 at once), so a reloaded page starts above the old one: from the clock.
let seq = Date.now();
let lastDrawn = 0;         // the seq of the image on screen: only a newer answer replaces it
let rafPending = false;
let lastImage = null;      // {data, w, h, view, upsample}
let shown = null;          // what draw() displayed: {lo, hi, unit, cmap}
let rect = null;           // [r0, r1, c0, c1] drawn, scan positions
let polling = false;
let placeholderTried = false;

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
  const j = await r.json().catch(() => ({ error: r.statusText || 'bad answer' }));
  if (!r.ok) throw new Error(j.error || r.statusText);
  return j;
}

// The previews' status line (never the fit's results: those have their own panel).
function setStatus(msg, err) {
  $('status').textContent = msg;
  $('status').className = err ? 'error' : '';
}

function trim(list) { if (list.length > 5000) list.splice(0, 1000); } // a long session stays small

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

// Draws an answer if it is newer than the image on screen; true when drawn.
function show(my, image, release) {
  if (my <= lastDrawn) { // a newer image is on screen already
    trace.stale.push({ seq: my, onScreen: lastDrawn, release: !!release });
    trim(trace.stale);
    return false;
  }
  lastDrawn = my;
  lastImage = image;
  draw();
  trace.drawn.push({ seq: my, latest: seq, release: !!release, view: image.view, t: performance.now() });
  trim(trace.drawn);
  return true;
}

async function preview(release) {
  const view = $('view').value;
  if (VIRTUAL[view]) { // the aberrations do not change a virtual image
    if (release) showVirtual(view);
    return;
  }
  const my = ++seq;
  const body = Object.assign(params(), {
    upsample: release ? Number($('upsample').value) : 1,
    subset: release ? 0 : Math.max(0, Math.floor(num('subset'))),
    estimator: $('estimator').value,
    want_loss: !!release,
    view,
    seq: my,
  });
  trace.sent.push({ seq: my, release: !!release, t: performance.now() });
  trace.lastBody = body;
  trim(trace.sent);
  const t0 = performance.now();
  let r;
  try { r = await api('api/preview', body); } catch (e) { setStatus('connection lost: ' + e.message, true); return; }
  trace.answers.push({ seq: my, status: r.status, release: !!release });
  trim(trace.answers);
  if (r.status === 204 || r.headers.get('X-Superseded')) { // superseded: nothing to draw
    await r.arrayBuffer().catch(() => null); // read to its (empty) end, else the browser counts it aborted
    return;
  }
  if (!r.ok) {
    const j = await r.json().catch(() => ({}));
    if (r.status === 409 && /superseded/.test(j.error || '')) return; // an older server's way of saying it
    if (my > lastDrawn) setStatus('preview: ' + (j.error || r.statusText), true);
    return;
  }
  const buf = await r.arrayBuffer();
  const w = Number(r.headers.get('X-Width')), h = Number(r.headers.get('X-Height'));
  if (!show(my, { data: new Float32Array(buf), w, h, view, upsample: body.upsample }, release)) return;
  const ms = performance.now() - t0;
  $('reqtime').textContent = `${ms.toFixed(0)} ms (server ${(1000 * Number(r.headers.get('X-Seconds'))).toFixed(0)} ms)`;
  if (release) {
    const loss = Number(r.headers.get('X-Loss'));
    trace.lastLoss = loss;
    $('loss').textContent = loss.toPrecision(8);
    $('loss').dataset.loss = r.headers.get('X-Loss');
    $('loss').dataset.seq = String(my);
    setStatus(`${view}: ${w}×${h} at ${body.upsample}×, full BF set`);
    refreshMemory(); // once per release, not per drag frame
  } else {
    setStatus(`dragging: ${w}×${h}, subset ${body.subset || 'all'}`);
  }
}

// A virtual image (scan-sized float32): drawn like a preview; a failure's reason in the status.
async function showVirtual(kind, quiet) {
  const my = ++seq;
  trace.sent.push({ seq: my, release: true, virtual: kind, t: performance.now() });
  trim(trace.sent);
  let r;
  try { r = await api('api/virtual?kind=' + encodeURIComponent(kind)); } catch (e) {
    if (!quiet) setStatus('connection lost: ' + e.message, true);
    return false;
  }
  trace.answers.push({ seq: my, status: r.status, release: true });
  if (!r.ok) {
    const j = await r.json().catch(() => ({}));
    const why = r.status === 404 ? 'this server has no virtual images' : (j.error || r.statusText);
    if (!quiet && my > lastDrawn) setStatus(`${VIRTUAL[kind].label}: ${why}`, true);
    return false;
  }
  const buf = await r.arrayBuffer();
  const w = Number(r.headers.get('X-Width')), h = Number(r.headers.get('X-Height'));
  if (!show(my, { data: new Float32Array(buf), w, h, view: kind, upsample: 1 }, true)) return false;
  setStatus(`${VIRTUAL[kind].label}: ${w}×${h}${quiet ? ' (until the phase image comes)' : ''}`);
  return true;
}

function schedulePreview() {
  if (rafPending) return;
  rafPending = true;
  requestAnimationFrame(() => { rafPending = false; preview(false); });
}

// ---- colours --------------------------------------------------------------------------------

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

// A number with as many decimals as a range of `span` needs (3 significant digits of the span).
function fmt(v, span) {
  const d = Math.min(6, Math.max(0, 2 - Math.floor(Math.log10(Math.abs(span) || 1))));
  const s = v.toFixed(d);
  return s === '-' + (0).toFixed(d) ? (0).toFixed(d) : s;
}

// Round values between lo and hi: about n of them, at 1, 2 or 5 × 10^k.
function niceTicks(lo, hi, n) {
  const raw = (hi - lo) / n, p = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * p).find((x) => x >= raw) || p;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-12 * Math.abs(hi); v += step) out.push(v);
  return { ticks: out, step };
}

// A vertical colour bar on canvas cv (CSS size w×h): the map from lo (bottom) to hi (top), the
// ends labelled with their values, round ticks between, the unit on top.
function colourBar(cv, w, h, lo, hi, unit, cmap) {
  const dpr = window.devicePixelRatio || 1;
  cv.style.width = w + 'px'; cv.style.height = h + 'px';
  cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
  const g = cv.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  if (!(hi > lo)) return;
  const top = 22, bot = h - 8, bx = 2, bw = 14;
  const L = lut(cmap), strip = g.createImageData(1, 256);
  for (let i = 0; i < 256; i++) {
    const k = (255 - i) * 3;
    strip.data.set([L[k], L[k + 1], L[k + 2], 255], 4 * i);
  }
  const off = document.createElement('canvas');
  off.width = 1; off.height = 256;
  off.getContext('2d').putImageData(strip, 0, 0);
  g.imageSmoothingEnabled = true;
  g.drawImage(off, bx, top, bw, bot - top);
  g.strokeStyle = '#777'; g.lineWidth = 1;
  g.strokeRect(bx + 0.5, top + 0.5, bw - 1, bot - top - 1);
  g.fillStyle = '#e3e3e3'; g.font = '11px system-ui, sans-serif'; g.textBaseline = 'middle';
  g.fillText(unit, bx, 9);
  const y = (v) => bot - (v - lo) / (hi - lo) * (bot - top);
  const span = hi - lo;
  const label = (v, yy, bold) => {
    g.fillStyle = bold ? '#fff' : '#b8c0ca';
    g.fillRect(bx + bw, yy - 0.5, 4, 1);
    g.fillText(fmt(v, span), bx + bw + 6, Math.min(bot - 4, Math.max(top + 4, yy)));
  };
  label(hi, top, true);
  label(lo, bot, true);
  const { ticks } = niceTicks(lo, hi, Math.max(2, Math.floor((bot - top) / 60)));
  for (const v of ticks) {
    const yy = y(v);
    if (yy - top > 14 && bot - yy > 14) label(v, yy, false);
  }
}

// ---- drawing --------------------------------------------------------------------------------

function unitOf(view) { return VIRTUAL[view] ? VIRTUAL[view].unit : UNITS[view] || ''; }

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
  cv.dataset.seq = String(lastDrawn);
  cv.dataset.view = view;
  shown = { lo, hi, unit: unitOf(view) + (flip < 0 ? ' (−)' : ''), cmap: $('cmap').value };
  drawColourBar();
  drawOverlay();
}

function drawColourBar() {
  const cb = $('cbar'), h = $('stack').clientHeight;
  if (!shown) { colourBar(cb, 80, h, 0, 0, '', 'gray'); return; }
  colourBar(cb, 80, h, shown.lo, shown.hi, shown.unit, shown.cmap);
  cb.dataset.lo = String(shown.lo);
  cb.dataset.hi = String(shown.hi);
  cb.dataset.unit = shown.unit;
}

// λ in Å of electrons at kv kilovolts (relativistic).
function wavelengthA(kv) {
  const V = kv * 1e3;
  return 12.2643 / Math.sqrt(V * (1 + 0.97845e-6 * V));
}

function niceLength(x) { // the largest of 1, 2, 5 × 10^k not above x
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  return [1, 2, 5, 10].map((m) => m * p).filter((v) => v <= x * (1 + 1e-9)).pop() || p;
}

function textBox(g, s, x, y, align) { // legible on any image: a dark box behind the text
  g.font = '13px system-ui, sans-serif';
  const w = g.measureText(s).width;
  const x0 = align === 'right' ? x - w : align === 'center' ? x - w / 2 : x;
  g.fillStyle = 'rgba(0,0,0,0.55)';
  g.fillRect(x0 - 3, y - 13, w + 6, 17);
  g.fillStyle = '#fff';
  g.textBaseline = 'alphabetic';
  g.fillText(s, x0, y);
}

// The FFT's scale: spatial frequency in 1/Å (the image sampled at scan_step/upsample spans
// ±upsample/(2·step)), a scale bar, and the 2α/λ limit of the SSB transfer as a circle.
function drawFFTScale(g, W, H) {
  const ov = $('overlay'), cal = state.calibration;
  const { w: nx, h: ny, upsample } = lastImage;
  const fieldR = state.shape[0] * cal.scan_step_A[0], fieldC = state.shape[1] * cal.scan_step_A[1];
  const pxX = W * fieldC / nx, pxY = H * fieldR / ny; // display px per 1/Å
  const x0 = (Math.floor(nx / 2) + 0.5) / nx * W, y0 = (Math.floor(ny / 2) + 0.5) / ny * H;
  const nyq = upsample / (2 * cal.scan_step_A[1]);
  const lam = wavelengthA(cal.kv), k = 2 * cal.semiangle_mrad * 1e-3 / lam;
  g.save();
  g.setLineDash([6, 4]);
  g.strokeStyle = '#4fc3f7'; g.lineWidth = 1.5;
  g.beginPath();
  g.ellipse(x0, y0, k * pxX, k * pxY, 0, 0, 2 * Math.PI);
  g.stroke();
  g.restore();
  const ly = Math.max(18, y0 - k * pxY - 6);
  textBox(g, `2α/λ = ${k.toFixed(2)} Å⁻¹`, x0, ly, 'center');
  // frequency ticks along the bottom edge
  g.fillStyle = '#fff';
  const { ticks } = niceTicks(-nyq, nyq, 6);
  for (const f of ticks) g.fillRect(x0 + f * pxX - 0.5, H - 6, 1, 6);
  textBox(g, `±${nyq.toFixed(2)} Å⁻¹ (Nyquist)`, 8, 20, 'left');
  const len = niceLength(2 * nyq / 5), px = len * pxX;
  g.fillStyle = '#fff';
  g.fillRect(W - px - 16, H - 24, px, 5);
  textBox(g, `${+len.toPrecision(3)} Å⁻¹`, W - px - 16, H - 30, 'left');
  ov.dataset.fftscale = String(len);
  ov.dataset.nyquist = String(nyq);
  ov.dataset.aperture = String(k);
}

function drawOverlay(drag) {
  const ov = $('overlay'), g = ov.getContext('2d');
  const dpr = window.devicePixelRatio || 1, W = ov.width / dpr, H = ov.height / dpr;
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, W, H);
  delete ov.dataset.fftscale;
  if (!lastImage) { // the placeholder says what is happening
    const busy = state && state.job.busy;
    const msg = !state ? 'connecting…' : busy ? `${state.job.stage || state.job.name}…` : 'no image yet';
    g.fillStyle = '#9aa3ad'; g.font = '15px system-ui, sans-serif'; g.textAlign = 'center';
    g.fillText(msg, W / 2, H / 2);
    g.textAlign = 'start';
    return;
  }
  if (!state) return;
  const sr = state.shape[0], sc = state.shape[1];
  const fft = lastImage.view === 'fft';
  const r = drag || rect;
  if (r && !fft) {
    g.strokeStyle = '#ffd23f'; g.lineWidth = 2;
    g.strokeRect(r[2] / sc * W, r[0] / sr * H, (r[3] - r[2]) / sc * W, (r[1] - r[0]) / sr * H);
  }
  if (!state.calibration) return;
  if (fft) { drawFFTScale(g, W, H); return; }
  // scale bar: a round length near 1/5 of the width
  const widthA = sc * state.calibration.scan_step_A[1];
  const len = niceLength(widthA / 5), px = len / widthA * W;
  g.fillStyle = '#fff';
  g.fillRect(W - px - 16, H - 24, px, 5);
  textBox(g, len >= 10 ? `${+(len / 10).toPrecision(3)} nm` : `${+len.toPrecision(3)} Å`, W - px - 16, H - 30, 'left');
}

// ---- layout ---------------------------------------------------------------------------------

// The image takes the room it has: the window's width less the controls' column and the colour
// bar (all of it when the controls are below), and the window's height below the image's top less
// the two status lines (at least 320 px when the controls are below). The box keeps the scan's
// aspect; the overlay's pixels follow the box (and the screen's density). The image and the
// controls sit together in the middle of a wide window.
const CBAR_W = 80, CBAR_GAP = 6;
function layout() {
  const main = document.querySelector('main'), left = $('left'), stack = $('stack');
  const cs = getComputedStyle(main), narrow = cs.flexDirection === 'column';
  const inner = main.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  const room = narrow ? inner : inner - $('controls').offsetWidth - parseFloat(cs.columnGap || 16);
  const availW = room - CBAR_W - CBAR_GAP;
  const top = stack.getBoundingClientRect().top + window.scrollY;
  let availH = window.innerHeight - top - 64;
  if (narrow) availH = Math.max(availH, 320);
  const side = Math.floor(Math.max(120, Math.min(availW, availH)));
  const sr = state ? state.shape[0] : 1, sc = state ? state.shape[1] : 1;
  const w = sr >= sc ? Math.round(side * sc / sr) : side, h = sr >= sc ? side : Math.round(side * sr / sc);
  if (stack.clientWidth !== w || stack.clientHeight !== h) {
    stack.style.width = w + 'px';
    stack.style.height = h + 'px';
  }
  left.style.width = narrow ? '' : Math.max(w + CBAR_W + CBAR_GAP, Math.min(room, 480)) + 'px';
  const dpr = window.devicePixelRatio || 1, ov = $('overlay');
  const pw = Math.round(w * dpr), ph = Math.round(h * dpr);
  if (ov.width !== pw || ov.height !== ph) { ov.width = pw; ov.height = ph; }
  drawColourBar();
  drawOverlay();
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
  try { state = await apiJSON('api/state'); showMemory(state.memory); } catch (e) { /* the next one will tell */ }
}

// The running job as stages: the start-up's calibrate → G build → fit (and any other stage a job
// reports), each done, running (its fraction, never going back within a stage) or to come.
let track = null;
function showJob(s) {
  const j = s.job, busy = j.busy, now = performance.now();
  const bar = $('progress');
  $('cancel').disabled = !busy;
  for (const id of ['fit', 'crop_refit', 'fit_regions', 'fit_tilt', 'refine']) $(id).disabled = busy || !s.ready;
  if (!busy) {
    track = null;
    bar.value = 0;
    bar.classList.add('idle');
    $('stages').textContent = '';
    $('jobname').textContent = s.error ? 'error: ' + s.error : '';
    $('jobname').className = s.error ? 'error' : '';
    document.body.dataset.stage = '';
    return;
  }
  if (!track || track.name !== j.name.replace(/ \d+\/\d+$/, '')) {
    track = { name: j.name.replace(/ \d+\/\d+$/, ''), seen: [], stage: null, frac: 0, t: now };
  }
  if (j.stage && j.stage !== track.stage) {
    if (!track.seen.includes(j.stage)) track.seen.push(j.stage);
    track.stage = j.stage; track.frac = 0; track.t = now;
  }
  track.frac = Math.max(track.frac, j.fraction || 0);
  bar.classList.remove('idle');
  const expected = /calibrate/.test(track.name) && /fit/.test(track.name) ? START_STAGES : [];
  const list = expected.concat(track.seen.filter((x) => !expected.includes(x)));
  const cur = track.stage ? list.indexOf(track.stage) : 0;
  const secs = ((now - track.t) / 1000).toFixed(0);
  const box = $('stages');
  box.textContent = '';
  list.forEach((name, i) => {
    if (i) box.append(' → ');
    const e = document.createElement('span');
    if (i < cur) { e.className = 'done'; e.textContent = name + ' ✓'; } else if (i === cur) {
      e.className = 'cur';
      e.textContent = track.frac > 0 ? `${name} ${(100 * track.frac).toFixed(0)} %` : `${name} ${secs} s`;
    } else e.textContent = name;
    box.append(e);
  });
  // The bar: the stages done and the running one's fraction.
  const n = Math.max(1, list.length);
  bar.value = list.length ? (Math.max(0, cur) + track.frac) / n : track.frac;
  $('jobname').textContent = j.name + (list.length ? ':' : '');
  $('jobname').className = '';
  bar.dataset.stage = track.stage || '';
  document.body.dataset.stage = track.stage || '';
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

function wrap90(d) { const r = ((d + 90) % 180 + 180) % 180; return r - 90; }

// The fit's results, kept until the next fit (previews never write here). φ12 in both frames
// (docs/fit.md): probe = scan − rotation; a mirrored detector: probe = 90° + rotation − scan
// (mod 180°).
function showFit(s) {
  const f = s.fit;
  const set = (id, t, cls) => { $(id).textContent = t; $(id).className = cls || ''; };
  if (!f || !f.done || !f.result) {
    for (const id of ['r_C10', 'r_C12', 'r_phi_scan', 'r_phi_probe', 'r_rot', 'r_flip', 'r_loss', 'r_conf']) set(id, '—');
    set('r_warning', 'no fit yet');
    $('results').dataset.done = '0';
  } else {
    const r = f.result, rot = r.rotation_deg, phi = r.phi12_deg;
    const probe = f.phi12_probe_deg ?? wrap90(f.flip ? 90 + rot - phi : phi - rot);
    // the fit's standard errors (docs/fit.md "Standard errors"); none for a held value
    const se = f.standard_errors || {};
    const pm = (v, unit, digits) => (Number.isFinite(v) ? ` ± ${v.toFixed(digits)}${unit}` : '');
    set('r_C10', `${r.C10_nm.toFixed(3)} nm${pm(se.C10_nm, ' nm', 3)}`);
    set('r_C12', `${r.C12_nm.toFixed(3)} nm${pm(se.C12_nm, ' nm', 3)}`);
    set('r_phi_scan', `${phi.toFixed(2)}°${pm(se.phi12_deg, '°', 2)}`);
    set('r_phi_probe', `${probe.toFixed(2)}°`);
    const src = f.rotation_source ? ` (${f.rotation_source})` : '';
    const rse = Number.isFinite(se.rotation_deg) ? se.rotation_deg : f.rotation_sigma_deg;
    const sig = Number.isFinite(rse) ? ` ± ${rse.toFixed(2)}°` : '';
    set('r_rot', `${rot.toFixed(2)}°${sig}${src}`);
    set('r_flip', `${f.flip ? 'mirrored' : 'not mirrored'}${f.flip_source ? ' (' + f.flip_source + ')' : ''}`);
    set('r_loss', `${f.loss.toPrecision(8)}${Number.isFinite(f.seconds) && f.seconds > 0 ? ` · fit took ${f.seconds.toFixed(1)} s` : ''}`);
    const confident = f.confident ?? !f.warning;
    set('r_conf', confident ? 'confident: a clear minimum, the errors inside the tolerance' : 'not confident', confident ? 'good' : 'warn');
    set('r_warning', f.warning ? '⚠ ' + f.warning : '', f.warning ? 'warn' : '');
    $('results').dataset.done = '1';
    $('results').dataset.c10 = String(r.C10_nm);
  }
  const t = s.truth;
  document.body.classList.toggle('has-truth', !!t);
  if (t) {
    $('t_C10').textContent = `${t.C10_nm.toFixed(3)} nm`;
    $('t_C12').textContent = `${t.C12_nm.toFixed(3)} nm`;
    $('t_phi_probe').textContent = `${t.phi12_deg.toFixed(2)}°`;
    $('t_phi_scan').textContent = Number.isFinite(t.phi12_scan_deg) ? `${t.phi12_scan_deg.toFixed(2)}°` : '';
  }
}

// While the start-up runs: the first image there is (a virtual BF image, computed with the
// calibration) instead of a black square, when the server says it has one.
function placeholder(s) {
  if (placeholderTried || lastImage || !s.ready || !(s.virtual && s.virtual.ready)) return;
  placeholderTried = true;
  showVirtual('bf', true);
}

// Polls api/state every 250 ms while a job runs (never while idle), then calls done(state).
async function pollWhileBusy(done) {
  if (polling) return;
  polling = true;
  let first = !state;
  for (;;) {
    try { state = await apiJSON('api/state'); } catch (e) { setStatus(e.message, true); }
    if (state) {
      if (first) { first = false; layout(); }
      showJob(state); showMemory(state.memory); placeholder(state);
      if (!lastImage) drawOverlay();
    }
    if (state && !state.job.busy) break;
    await new Promise((res) => setTimeout(res, 250));
  }
  polling = false;
  if (done) done(state);
}

function afterFit(s) {
  $('dataset').textContent = `${s.dataset} · ${s.shape.join('×')}${s.backend ? ' · ' + s.backend : ''}`;
  showTrials(s);
  fromCurrent(s.current);
  showFit(s);
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
    setStatus(`${path.replace(/^api\//, '')}: ${e.message}`, true);
  }
  await pollWhileBusy();
}

function median(a) {
  const s = a.slice().sort((x, y) => x - y), n = s.length;
  return n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

// The Fit Regions map of C10: colours over median ± max(3·1.4826·MAD, 0.5 nm), so that a spread
// of a few pm is not stretched over the whole map; the values, their spread and a colour bar.
const MAP_MIN_HALF_NM = 0.5;
function drawRegionMap(m) {
  const cv = $('regionmap'), g = cv.getContext('2d');
  g.clearRect(0, 0, cv.width, cv.height);
  const vals = m.cells.map((c) => c.C10_nm);
  const med = median(vals), mad = median(vals.map((v) => Math.abs(v - med)));
  const half = Math.max(MAP_MIN_HALF_NM, 3 * 1.4826 * mad);
  const lo = med - half, hi = med + half;
  const mn = Math.min(...vals), mx = Math.max(...vals);
  const mean = vals.reduce((a, b) => a + b, 0) / vals.length;
  const std = Math.sqrt(vals.reduce((a, b) => a + (b - mean) ** 2, 0) / vals.length);
  const L = lut('viridis');
  const [r0, r1, c0, c1] = m.rect;
  const b = m.branch_region; // the cell that settled the 180° branch for the others (null: none)
  m.cells.forEach((c, i) => {
    let t = (c.C10_nm - lo) / (hi - lo);
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    const k = Math.round(t * 255) * 3;
    g.fillStyle = `rgb(${L[k]},${L[k + 1]},${L[k + 2]})`;
    const x = (c.rect[2] - c0) / (c1 - c0) * cv.width, y = (c.rect[0] - r0) / (r1 - r0) * cv.height;
    const w = (c.rect[3] - c.rect[2]) / (c1 - c0) * cv.width, h = (c.rect[1] - c.rect[0]) / (r1 - r0) * cv.height;
    g.fillRect(x, y, w, h);
    const settled = b && b.index === i, e = settled ? 1 : 0.5;
    g.strokeStyle = settled ? '#fff' : '#1b1d21'; g.lineWidth = settled ? 2 : 1;
    g.strokeRect(x + e, y + e, w - 2 * e, h - 2 * e);
    g.fillStyle = t > 0.6 ? '#000' : '#fff';
    g.font = '12px sans-serif';
    if (w > 40) g.fillText(`${c.C10_nm.toFixed(3)}`, x + 4, y + 16);
  });
  $('mapbox').classList.add('has-map');
  cv.dataset.cells = String(m.cells.length);
  cv.dataset.lo = String(lo);
  cv.dataset.hi = String(hi);
  colourBar($('mapbar'), 72, cv.height, lo, hi, 'C10 nm', 'viridis');
  $('maplegend').textContent = `C10 over ${m.rows}×${m.cols} regions: min ${mn.toFixed(3)} nm, max ${mx.toFixed(3)} nm, ` +
    `spread ${(1000 * (mx - mn)).toFixed(0)} pm, std ${(1000 * std).toFixed(0)} pm; colours: median ${med.toFixed(3)} ± ${half.toFixed(2)} nm` +
    (b ? `; the 180° branch from region ${b.index + 1} (outlined; rotation ${b.rotation_deg.toFixed(2)}°, held for the others)` : '') +
    (m.branch_unsettled ? '; no region settles the 180° branch: each keeps the rotation its own fit found (give --rotation, or --calibration from a thin area\'s fit)' : '');
}

// Refine (docs/refine.md "Viewer"): the multislice refinement of the drawn region (the whole
// field without one), with the job's progress and Cancel; then its projected phase, and each
// slice's phase through the slider (api/refine/image?kind=projected|N, float32 like a preview).
let refined = null;        // the last api/refine answer
async function showRefineImage() {
  const k = Number($('refine_slice').value), kind = k < 0 ? 'projected' : String(k);
  const r = await api('api/refine/image?kind=' + kind);
  if (!r.ok) { $('refine_result').textContent = 'no image: ' + r.statusText; return; }
  const a = new Float32Array(await r.arrayBuffer());
  const w = Number(r.headers.get('X-Width')), h = Number(r.headers.get('X-Height'));
  const [lo, hi] = percentiles(a, num('plo'), num('phi'));
  const off = document.createElement('canvas');
  off.width = w; off.height = h;
  const L = lut($('cmap').value), im = off.getContext('2d').createImageData(w, h);
  for (let i = 0; i < w * h; i++) {
    const t = Math.min(1, Math.max(0, (a[i] - lo) / (hi - lo))), q = Math.round(t * 255) * 3;
    im.data.set([L[q], L[q + 1], L[q + 2], 255], 4 * i);
  }
  off.getContext('2d').putImageData(im, 0, 0);
  const cv = $('refine_img'), g = cv.getContext('2d');
  g.imageSmoothingEnabled = false;
  g.clearRect(0, 0, cv.width, cv.height);
  const s = Math.min(cv.width / w, cv.height / h);
  g.drawImage(off, 0, 0, w * s, h * s);
  colourBar($('refine_bar'), 72, 256, lo, hi, 'rad', $('cmap').value);
  cv.dataset.kind = kind;
  $('refine_slice_label').textContent = k < 0 ? 'projected phase (sum of the slices)' : `slice ${k + 1} of ${refined.slices}`;
  $('refineview').classList.add('has-image');
}

// What the refinement kept at its start: with one slice the model has no depth, so the tilt and
// the thickness are the seed's (the record's tilt_refined, thickness_refined).
function notRefined(j) {
  const kept = [];
  if (j.tilt_refined === false) kept.push('tilt');
  if (j.thickness_refined === false) kept.push('thickness');
  if (!kept.length) return '';
  return ` (${kept.join(' and ')} not refined: the start's values${j.slices === 1 ? ', one slice has no depth' : ''})`;
}

function refine() {
  const r = rect || [0, state.shape[0], 0, state.shape[1]];
  const body = { rect: r, iterations: Math.floor(num('ref_iter')), thickness_range_nm: [num('ref_tlo'), num('ref_thi')] };
  if (num('ref_slices') > 0) body.slices = Math.floor(num('ref_slices'));
  $('refine_result').textContent = '';
  $('refine_warning').textContent = '';
  delete $('refinebox').dataset.done;
  runJob('api/refine', body, async (j) => {
    refined = j;
    const f = (x, d) => (x === null ? '—' : x.toFixed(d));
    $('refine_result').textContent = `C10 ${f(j.C10_nm, 2)} nm, C12 ${f(j.C12_nm, 2)} nm, φ12 ${f(j.phi12_deg, 1)}°, ` +
      `tilt (${j.tilt_mrad.map((x) => f(x, 2)).join(', ')}) mrad, ${f(j.thickness_nm, 1)} nm in ${j.slices} slices` +
      notRefined(j);
    $('refine_warning').textContent = j.confident ? '' : '⚠ ' + (j.warning || 'not confident');
    $('refine_slice').max = String(j.slices - 1);
    $('refine_slice').value = '-1';
    await showRefineImage();
    $('refinebox').dataset.done = '1';
  }).then(() => { if (refined) { showFit(state); fromCurrent(state.current); preview(true); } });
}

async function showCalibration() {
  try {
    const info = await apiJSON('api/calibration');
    const r = await api('api/calibration/mean');
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
    const c = state.calibration;  // the sampling in `ssb4d calibrate`'s words, and its 3 sigma warning
    if (c && c.sampling) $('calinfo').textContent += `; sampling ${c.sampling}${c.sampling_warning ? ' ⚠ ' + c.sampling_warning : ''}`;
  } catch (e) { $('calinfo').textContent = e.message; }
}

// Save calibration: a plain file name (the server writes only into its output folder) and where
// the file went, or why not.
async function save() {
  const out = $('saved'), name = $('savename').value.trim();
  delete out.dataset.path;
  if (!name || name.includes('/') || name.includes('\\') || name.includes('..')) {
    out.textContent = 'the file name must be a plain name like calibration.json (no folders)';
    out.className = 'error';
    return;
  }
  try {
    await apiJSON('api/apply', params()); // the values shown become the session's
    const j = await apiJSON('api/save', { name, force: $('force').checked });
    out.textContent = 'saved to ' + j.path;
    out.dataset.path = j.path;
    out.className = '';
  } catch (e) { out.textContent = 'not saved: ' + e.message; out.className = 'error'; }
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
  $('cancel').addEventListener('click', () => api('api/cancel', {}));
  $('fit').addEventListener('click', () => runJob('api/fit', {}, () => {}).then(() => afterFit(state)));
  $('fit_tilt').addEventListener('click', () => runJob('api/fit_tilt', {}, (j) => {
    setStatus(`tilt fit: (${j.tilt_mrad.map((x) => x.toFixed(2)).join(', ')}) mrad, ${j.thickness_nm.toFixed(1)} nm, gain ${j.gain.toFixed(3)}`);
  }).then(() => { fromCurrent(state.current); preview(true); }));
  $('reset').addEventListener('click', async () => {
    try { const s = await apiJSON('api/reset', {}); state = s; fromCurrent(s.current); preview(true); } catch (e) { setStatus(e.message, true); }
  });
  $('save').addEventListener('click', save);
  $('crop_refit').addEventListener('click', () => {
    const r = rect || [0, state.shape[0], 0, state.shape[1]];
    runJob('api/region', { rect: r }, (j) => {
      $('region_result').textContent = `C10 ${j.C10_nm.toFixed(2)} nm, C12 ${j.C12_nm.toFixed(2)} nm, φ12 ${j.phi12_deg.toFixed(1)}°, loss ${j.loss.toPrecision(6)}`;
      $('region_result').dataset.c10 = String(j.C10_nm);
      $('apply_region').disabled = false;
    });
  });
  $('apply_region').addEventListener('click', async () => {
    try { const s = await apiJSON('api/apply', { region: true }); state = s; fromCurrent(s.current); preview(true); } catch (e) { setStatus(e.message, true); }
  });
  $('fit_regions').addEventListener('click', () => {
    const body = { rows: Math.floor(num('grid_rows')), cols: Math.floor(num('grid_cols')) };
    if (rect) body.rect = rect;
    runJob('api/regions', body, drawRegionMap);
  });
  $('refine').addEventListener('click', refine);
  $('refine_slice').addEventListener('input', () => { if (refined) showRefineImage(); });
  $('caldetails').addEventListener('toggle', () => { if ($('caldetails').open) showCalibration(); });
  setupRect();
  // Only a change of width re-lays out (the height follows from it): no resize loop.
  let mainW = -1;
  new ResizeObserver(() => {
    const w = document.querySelector('main').clientWidth;
    if (w !== mainW) { mainW = w; requestAnimationFrame(layout); }
  }).observe(document.querySelector('main'));
  window.addEventListener('resize', layout);
  layout();
}

setup();
pollWhileBusy(afterFit);
