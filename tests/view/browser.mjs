// browser.mjs — `ssb4d view` in a real browser: headless Debian Chromium driven by playwright-core
// (never a downloaded browser), on the tiny simulated dataset.
// usage: node browser.mjs SSB4D_BINARY WORKDIR   (exit 0 pass, 1 fail, 77 skip: no chromium/node_modules)
// Checks: the page loads, the start-up's stages show and the fit finishes; the results panel holds
// the fit (and keeps it through previews and region refits); the colour bar shows the range; the
// page uses relative URLs only; a burst of slider input events: every finished preview is drawn, in
// order, the release last, with nothing in the console (superseded previews are 204); on release the
// displayed loss equals `ssb4d reconstruct --json`'s for the same values; the FFT view with its
// 1/Å scale and 2α/λ circle; at 760, 1280 and 1920 px wide no sideways scroll, the image grows, the
// overlay lies on it, a rectangle maps to scan positions; a drawn region is refitted; Fit Regions
// draws its map (robust colour range, spread); a virtual BF image; Save calibration under a typed
// name writes a file that `ssb4d reconstruct --calibration` reproduces bit for bit (the viewer's
// image and loss at those values), refuses to replace it and refuses a folder; screenshots are kept
// in WORKDIR.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const [BIN, WORK] = process.argv.slice(2).map((a) => path.resolve(a));
const here = path.dirname(fileURLToPath(import.meta.url));
const CHROMIUM = '/usr/bin/chromium';
// Waits are generous: CI runs the browser under sanitizers beside other tests on 2 cores; a hang
// still fails (ctest's timeout), a slow machine does not.
const SLOW = 4;
if (!fs.existsSync(CHROMIUM) || !fs.existsSync(path.join(here, 'node_modules', 'playwright-core'))) {
  console.log('SKIP: needs /usr/bin/chromium and tests/view/node_modules (scripts/install-deps.sh)');
  process.exit(77);
}
const { chromium } = await import(path.join(here, 'node_modules', 'playwright-core', 'index.mjs'));

const fails = [];
function check(cond, what) {
  console.log((cond ? 'ok   ' : 'FAIL ') + what);
  if (!cond) fails.push(what);
}

// The float32 data of a little-endian .npy file (version 1 or 2 header).
function readNpyF32(file) {
  const b = fs.readFileSync(file);
  const v = b[6];
  const hl = v === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const off = (v === 1 ? 10 : 12) + hl;
  return b.subarray(off);
}

// page.waitForFunction evaluates strings, which the page's CSP (default-src 'self') forbids: poll.
async function waitFor(page, fn, arg, { timeout }) {
  const end = Date.now() + timeout;
  for (;;) {
    if (await page.evaluate(fn, arg)) return;
    if (Date.now() > end) {
      const t = await page.evaluate(() => JSON.stringify({ sent: window.__ssb4d.sent.slice(-5), drawn: window.__ssb4d.drawn.slice(-5), status: document.getElementById('status').textContent }));
      throw new Error('timed out waiting for ' + fn.toString().slice(0, 120) + '\npage: ' + t);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

// The same double, as far as reconstruct --json can say: cJSON prints 15 significant digits when
// they read back within its epsilon, so its number may sit an ulp or two from the exact loss the
// server sends (X-Loss, %.17g). Anything beyond 1e-15 relative is a real difference.
const sameLoss = (a, b) => Math.abs(a - b) <= 1e-15 * Math.abs(b);

const t0 = Date.now();
const work = path.join(WORK, 'view_browser_test');
fs.rmSync(work, { recursive: true, force: true });
fs.mkdirSync(work, { recursive: true });
execFileSync(BIN, ['simulate', '--preset', 'tiny', '-o', 'x.npy', '-q'], { cwd: work });
const server = spawn(BIN, ['view', 'x.npy', '--port', '0', '-q'], { cwd: work, stdio: ['ignore', 'pipe', 'inherit'] });
const exited = new Promise((res) => server.on('exit', (code, sig) => res(code ?? sig)));
const url = await new Promise((res, rej) => {
  const rl = createInterface({ input: server.stdout });
  rl.once('line', (l) => res(l.split(' ')[2]));
  setTimeout(() => rej(new Error('no URL printed')), 30000);
});
console.log('server: ' + url);

const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
const base = url.split('?')[0]; // …/ : the page; the API lives under it (relative URLs)
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const external = [], consoleErrors = [], failed = [];
  page.on('request', (r) => { if (!r.url().startsWith(base)) external.push(r.url()); });
  page.on('pageerror', (e) => fails.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('requestfailed', (r) => failed.push(`${r.url()} ${r.failure() ? r.failure().errorText : ''}`));
  await page.goto(url);
  // The start-up: the header names its stages (calibrate → G build → fit) while it runs.
  const stagesSeen = new Set();
  for (const end = Date.now() + 90000 * SLOW; Date.now() < end;) {
    const st = await page.evaluate(() => ({ ready: document.body.dataset.ready, stages: document.getElementById('stages').textContent }));
    if (st.stages) stagesSeen.add(st.stages);
    if (st.ready === '1') break;
    await new Promise((r) => setTimeout(r, 50));
  }
  await page.waitForSelector('body[data-ready="1"]', { timeout: 1000 });
  check(await page.$eval('#fit', (e) => e.dataset.done) === '1', 'page loads and the fit finishes');
  const seen = [...stagesSeen].join(' | ');
  check(!stagesSeen.size || /calibrate|G build|fit/.test(seen), 'start-up stages shown: ' + (seen || '(over before the first poll)'));
  await waitFor(page, () => window.__ssb4d.lastLoss !== null, null, { timeout: 30000 * SLOW });

  // The results panel holds the fit (φ12 in both frames, rotation, loss, confidence).
  const fitText = await page.$eval('#r_C10', (e) => e.textContent);
  const st0 = await page.evaluate(async () => (await fetch('api/state', { headers: { 'X-SSB4D-Token': new URLSearchParams(location.search).get('token') } })).json());
  check(/ nm$/.test(fitText) && Math.abs(parseFloat(fitText) - st0.fit.result.C10_nm) < 1e-3, `results panel: C10 ${fitText}`);
  // its standard error (issue 32), the state's to the panel's three decimals
  const se10 = st0.fit.standard_errors && st0.fit.standard_errors.C10_nm;
  check(Number.isFinite(se10) && se10 > 0 && fitText.includes(`± ${se10.toFixed(3)} nm`), `results panel: C10's standard error ${se10}`);
  check(await page.$eval('#r_phi_probe', (e) => /°$/.test(e.textContent)) && await page.$eval('#r_loss', (e) => e.textContent.length > 5),
    'results panel: φ12 (probe frame) and loss: ' + await page.$eval('#r_phi_probe', (e) => e.textContent));
  // The colour bar shows the displayed range, in rad for the phase.
  const bar = await page.$eval('#cbar', (c) => ({ lo: Number(c.dataset.lo), hi: Number(c.dataset.hi), unit: c.dataset.unit }));
  check(Number.isFinite(bar.lo) && bar.hi > bar.lo && bar.unit === 'rad', `colour bar: ${bar.lo.toFixed(3)} … ${bar.hi.toFixed(3)} ${bar.unit}`);
  // The page asks only relative URLs (it may live under ssb4d view --base-url PREFIX).
  const sources = await page.evaluate(async () => [await (await fetch('app.js')).text(), await (await fetch('./')).text()]);
  check(!/fetch\(\s*['"`]\/|api\(\s*['"`]\/|apiJSON\(\s*['"`]\//.test(sources[0]) && !/(href|src)="\//.test(sources[1]),
    'the page uses relative URLs only');
  const before = await page.$eval('#img', (c) => c.toDataURL());

  // A burst of input events on C10 (one per animation frame), then the release. Every finished
  // preview newer than the image on screen is drawn; none older; no error in the console.
  const errs0 = consoleErrors.length, failed0 = failed.length;
  const sent0 = await page.evaluate(() => window.__ssb4d.sent.length);
  const burst = await page.evaluate(async () => {
    const s = document.getElementById('C10');
    const v0 = Number(s.value);
    for (let i = 1; i <= 30; i++) {
      s.value = String(v0 + 0.2 * i);
      s.dispatchEvent(new Event('input', { bubbles: true }));
      await new Promise((r) => requestAnimationFrame(r));
    }
    s.dispatchEvent(new Event('change', { bubbles: true }));
    return window.__ssb4d.sent.length;
  });
  await waitFor(page, (n) => {
    const t = window.__ssb4d;
    return t.sent.length === n && t.answers.some((a) => a.seq === t.sent[n - 1].seq) && t.drawn.length &&
      t.drawn[t.drawn.length - 1].seq === t.sent[n - 1].seq;
  }, burst, { timeout: 30000 * SLOW });
  const tr = await page.evaluate(() => window.__ssb4d);
  const mine = new Set(tr.sent.slice(sent0).map((x) => x.seq)); // the burst's (never trimmed this early)
  const drags = tr.sent.filter((x) => !x.release && mine.has(x.seq)).length;
  const ok200 = tr.answers.filter((a) => !a.release && a.status === 200 && mine.has(a.seq)).length;
  const other = tr.answers.filter((a) => mine.has(a.seq) && a.status !== 200 && a.status !== 204);
  const drawnDrags = tr.drawn.filter((d) => !d.release && mine.has(d.seq));
  check(drags >= 10, `the burst sent ${drags} drag previews (${ok200} answered 200, the rest 204 superseded)`);
  check(other.length === 0, 'previews are answered 200 or 204 only: ' + other.map((a) => a.status).join(','));
  // An answer whose body finished after a newer image was drawn is stale, not drawn (bodies of two
  // connections can complete out of order on a loaded machine): drawn + stale covers every 200,
  // and most are drawn (the image keeps moving).
  const staleDrags = tr.stale.filter((d) => !d.release && mine.has(d.seq) && d.onScreen > d.seq).length;
  check(drawnDrags.length + staleDrags >= ok200 && drawnDrags.length >= Math.ceil(ok200 / 2),
    `every finished drag preview is drawn unless a newer one is on screen (${drawnDrags.length} drawn, ${staleDrags} stale, ${ok200} answered 200)`);
  check(tr.drawn.every((d, i) => i === 0 || d.seq > tr.drawn[i - 1].seq), 'images are drawn in request order, never an older over a newer');
  check(tr.drawn[tr.drawn.length - 1].release, 'the last image drawn is the release\'s');
  const ts = tr.drawn.filter((d) => mine.has(d.seq)).map((d) => d.t);
  const gaps = ts.slice(1).map((t, i) => t - ts[i]);
  console.log(`     drawn during the burst: ${ts.length}, largest gap ${gaps.length ? Math.max(...gaps).toFixed(0) : '-'} ms`);
  check(consoleErrors.length === errs0 && failed.length === failed0,
    'no console error or failed request during the drags: ' + consoleErrors.slice(errs0, errs0 + 2).concat(failed.slice(failed0, failed0 + 2)).join(' | '));
  const after = await page.$eval('#img', (c) => c.toDataURL());
  check(after !== before, 'the burst changed the image');
  check(await page.$eval('#r_C10', (e) => e.textContent) === fitText, 'the results panel keeps the fit after previews');

  // The displayed loss equals reconstruct's for the same values.
  const loss = await page.$eval('#loss', (e) => e.dataset.loss);
  // The values the release sent, exactly (JS prints the shortest string that reads back the same).
  const vals = await page.evaluate(() => {
    const b = window.__ssb4d.lastBody;
    return [b.C10_nm, b.C12_nm, b.phi12_deg, b.rotation_deg].map(String);
  });
  const rec = JSON.parse(execFileSync(BIN, ['reconstruct', 'x.npy', '--json', '-q', '--force', '-o', 'r1.npy',
    '--c10', vals[0], '--c12', vals[1], '--phi12', vals[2], '--rotation', vals[3]], { cwd: work }));
  check(sameLoss(Number(loss), rec.loss), `released loss ${loss} equals reconstruct --json's ${rec.loss}`);

  // FFT toggle: its scale in 1/Å (±1/(2·step) at native sampling) and the 2α/λ circle.
  const nDrawn = tr.drawn.length;
  await page.selectOption('#view', 'fft');
  await waitFor(page, (n) => window.__ssb4d.drawn.length > n, nDrawn, { timeout: 20000 * SLOW });
  const fft = await page.$eval('#img', (c) => c.toDataURL());
  check(fft !== after, 'FFT view shows another image');
  const sc = await page.$eval('#overlay', (o) => ({ len: Number(o.dataset.fftscale), nyq: Number(o.dataset.nyquist), k: Number(o.dataset.aperture) }));
  const cal = st0.calibration, up = Number(await page.$eval('#upsample', (e) => e.value));
  const V = cal.kv * 1e3, lam = 12.2643 / Math.sqrt(V * (1 + 0.97845e-6 * V));
  check(sc.len > 0 && Math.abs(sc.nyq - up / (2 * cal.scan_step_A[1])) < 1e-9 * sc.nyq && Math.abs(sc.k - 2e-3 * cal.semiangle_mrad / lam) < 1e-9 * sc.k,
    `FFT scale: bar ${sc.len} 1/Å, Nyquist ±${sc.nyq.toFixed(3)} 1/Å, 2α/λ ${sc.k.toFixed(3)} 1/Å`);
  check(await page.$eval('#cbar', (c) => c.dataset.unit) === 'log(1+|F|)', 'FFT colour bar: log-magnitude');
  await page.screenshot({ path: path.join(WORK, 'view_browser_fft.png') });
  await page.selectOption('#view', 'phase');
  await waitFor(page, (n) => window.__ssb4d.drawn.length > n + 1, nDrawn, { timeout: 20000 * SLOW });
  check(await page.$eval('#img', (c) => c.toDataURL()) === after, 'back to phase: the same image');
  check(await page.$eval('#r_C10', (e) => e.textContent) === fitText, 'the results panel still holds the fit');

  // Three window widths: no sideways scroll; the image grows with the window; the overlay sits on
  // the image; a rectangle drawn corner to corner is the whole field.
  const widths = [];
  for (const w of [760, 1280, 1920]) {
    await page.setViewportSize({ width: w, height: 900 });
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    await new Promise((r) => setTimeout(r, 100));
    const m = await page.evaluate(() => {
      const i = document.getElementById('img').getBoundingClientRect(), o = document.getElementById('overlay').getBoundingClientRect();
      return { sw: document.scrollingElement.scrollWidth, iw: window.innerWidth, w: i.width, h: i.height,
        aligned: Math.abs(i.left - o.left) < 0.5 && Math.abs(i.top - o.top) < 0.5 && Math.abs(i.width - o.width) < 0.5 && Math.abs(i.height - o.height) < 0.5 };
    });
    widths.push(m.w);
    check(m.sw <= m.iw, `${w} px: no horizontal scroll (scrollWidth ${m.sw}, innerWidth ${m.iw})`);
    check(m.aligned, `${w} px: the overlay lies on the image (${m.w.toFixed(0)}×${m.h.toFixed(0)} px)`);
    await page.screenshot({ path: path.join(WORK, `view_browser_${w}.png`) });
    if (w === 760) {
      const b = await (await page.$('#overlay')).boundingBox();
      await page.mouse.move(b.x + 1, b.y + 1);
      await page.mouse.down();
      await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2);
      await page.mouse.move(b.x + b.width - 1, b.y + b.height - 1);
      await page.mouse.up();
      check((await page.textContent('#rect')).includes('rows 0:32, cols 0:32'), `${w} px: rectangle mapped: ` + await page.textContent('#rect'));
    }
  }
  check(widths[0] < widths[1] && widths[1] < widths[2], `the image grows with the window: ${widths.map((x) => x.toFixed(0)).join(' < ')} px`);
  await page.setViewportSize({ width: 1280, height: 900 });

  // The trials table: a click puts the trial on the sliders and releases; Reset returns to the fit.
  await page.click('#trialsdetails summary');
  const rows = await page.$$('#trials tbody tr');
  check(rows.length > 0 && rows.length <= 50, `trials table: ${rows.length} rows`);
  let n0 = await page.evaluate(() => window.__ssb4d.drawn.length);
  const trialC10 = Number(await page.$eval('#trials tbody tr:nth-child(2) td:nth-child(2)', (e) => e.textContent));
  await page.click('#trials tbody tr:nth-child(2)');
  await waitFor(page, (k) => window.__ssb4d.drawn.length > k, n0, { timeout: 20000 * SLOW });
  const onSlider = Number(await page.$eval('#C10_num', (e) => e.value));
  check(Math.abs(onSlider - trialC10) < 2e-3, `a trial click applies it (C10 ${onSlider} vs ${trialC10})`);
  n0 = await page.evaluate(() => window.__ssb4d.drawn.length);
  await page.click('#reset');
  await waitFor(page, (k) => window.__ssb4d.drawn.length > k, n0, { timeout: 20000 * SLOW });
  check(Math.abs(Number(await page.$eval('#C10_num', (e) => e.value)) - st0.fit.result.C10_nm) < 1e-3, 'Reset returns to the fit');

  // The rectangle drawn at 760 px (the whole 32x32 field), refitted; Fit Regions on a 1x1 grid.
  await page.click('#crop_refit');
  await waitFor(page, () => document.getElementById('region_result').dataset.c10 !== undefined, null, { timeout: 60000 * SLOW });
  const c10 = Number(await page.$eval('#region_result', (e) => e.dataset.c10));
  check(Math.abs(c10 + 9.9) < 0.5, `region refitted: C10 ${c10.toFixed(3)} nm`);
  await page.fill('#grid_rows', '1');
  await page.fill('#grid_cols', '1');
  await waitFor(page, () => !document.getElementById('fit_regions').disabled, null, { timeout: 30000 * SLOW });
  await page.click('#fit_regions');
  await waitFor(page, () => document.getElementById('regionmap').dataset.cells === '1', null, { timeout: 60000 * SLOW });
  const map = await page.evaluate(() => ({ lo: Number(document.getElementById('regionmap').dataset.lo), hi: Number(document.getElementById('regionmap').dataset.hi), legend: document.getElementById('maplegend').textContent }));
  check(map.hi - map.lo >= 1 - 1e-9 && /std/.test(map.legend), `Fit Regions map: colours over ≥ 1 nm, ${map.legend}`);
  check(await page.$eval('#r_C10', (e) => e.textContent) === fitText, 'region refits leave the results panel alone');

  // Virtual images (api/virtual): drawn on the same canvas with their unit, or the reason shown.
  n0 = await page.evaluate(() => window.__ssb4d.drawn.length);
  await page.selectOption('#view', 'bf');
  await waitFor(page, (k) => window.__ssb4d.drawn.length > k || document.getElementById('status').className === 'error', n0, { timeout: 20000 * SLOW });
  const vb = await page.evaluate(() => ({ view: document.getElementById('img').dataset.view, unit: document.getElementById('cbar').dataset.unit, status: document.getElementById('status').textContent }));
  check(vb.view === 'bf' && vb.unit === 'counts', `virtual BF drawn in counts (${vb.status})`);
  n0 = await page.evaluate(() => window.__ssb4d.drawn.length);
  await page.selectOption('#view', 'phase');
  await waitFor(page, (k) => window.__ssb4d.drawn.length > k, n0, { timeout: 20000 * SLOW });

  // Save calibration under a typed name; reconstruct --calibration gives the viewer's image and
  // loss bit for bit. A second save under the same name is refused (no --force), with the reason.
  await page.fill('#savename', 'viewer-cal.json');
  await page.click('#save');
  await waitFor(page, () => document.getElementById('saved').dataset.path || document.getElementById('saved').className === 'error', null, { timeout: 30000 * SLOW });
  const savedPath = await page.$eval('#saved', (e) => e.dataset.path || e.textContent);
  const saved = path.resolve(work, savedPath);
  check(fs.existsSync(saved) && path.basename(saved) === 'viewer-cal.json', 'Save calibration wrote ' + savedPath);
  const rec2 = JSON.parse(execFileSync(BIN, ['reconstruct', 'x.npy', '--json', '-q', '--force', '-o', 'r2.npy',
    '--calibration', saved], { cwd: work }));
  const viewer = await page.evaluate(async () => {
    const token = new URLSearchParams(location.search).get('token');
    const r = await fetch('api/preview', { method: 'POST', headers: { 'X-SSB4D-Token': token, 'Content-Type': 'application/json' },
      body: JSON.stringify({ upsample: 1, want_loss: true }) }); // no seq: unordered, always computed
    return { loss: r.headers.get('X-Loss'), bytes: Array.from(new Uint8Array(await r.arrayBuffer())) };
  });
  const a = readNpyF32(path.join(work, 'r2.npy'));
  check(Buffer.from(viewer.bytes).equals(a), `reconstruct --calibration: the viewer's image bit for bit (${a.length} bytes)`);
  check(sameLoss(Number(viewer.loss), rec2.loss), `reconstruct --calibration: the viewer's loss ${viewer.loss} equals reconstruct's ${rec2.loss}`);
  await page.click('#save');
  await waitFor(page, () => document.getElementById('saved').className === 'error', null, { timeout: 30000 * SLOW });
  check(true, 'saving over it is refused: ' + await page.textContent('#saved'));
  await page.fill('#savename', '../evil.json');
  await page.click('#save');
  check(/plain name/.test(await page.textContent('#saved')) && !fs.existsSync(path.join(work, '..', 'evil.json')), 'a name with a folder is refused');

  // The calibration view.
  await page.click('#caldetails summary');
  await waitFor(page, () => document.getElementById('calinfo').textContent.includes('radius'), null, { timeout: 10000 * SLOW });
  check(true, 'calibration view: ' + await page.textContent('#calinfo'));
  check(external.length === 0, 'no request leaves the server: ' + external.slice(0, 3).join(' '));
  // Errors a person would see: none, beyond the one refused save (a 409 the browser logs).
  const unexpected = consoleErrors.filter((t) => !/status of 409/.test(t));
  check(unexpected.length === 0 && failed.length === 0, 'no console errors or failed requests: ' + unexpected.concat(failed).slice(0, 3).join(' | '));
  await page.screenshot({ path: path.join(WORK, 'view_browser.png'), fullPage: true }); // the whole page: image, panels, calibration
} catch (e) {
  fails.push('exception: ' + e.message);
  console.log(e);
} finally {
  await browser.close();
  server.kill('SIGTERM');
  const code = await exited;
  check(code === 0, `server exits 0 on SIGTERM (${code})`);
}
// The page under a prefix (ssb4d view --base-url, as behind jupyter-server-proxy): it loads, its
// start-up finishes and it draws, every request it makes stays under the prefix, and a proxy's
// Host is accepted only with --allow-host (checked by view_server; here the page itself).
{
  const PREFIX = '/user/me/proxy/8765';
  const srv = spawn(BIN, ['view', 'x.npy', '--port', '0', '-q', '--no-fit', '--base-url', PREFIX], { cwd: work, stdio: ['ignore', 'pipe', 'inherit'] });
  const gone = new Promise((res) => srv.on('exit', (code, sig) => res(code ?? sig)));
  const br = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  try {
    const purl = await new Promise((res, rej) => {
      createInterface({ input: srv.stdout }).once('line', (l) => res(l.split(' ')[2]));
      setTimeout(() => rej(new Error('no URL printed')), 30000);
    });
    check(purl.includes(PREFIX + '/?token='), 'under --base-url the printed URL has the prefix: ' + purl);
    const origin = new URL(purl).origin;
    const page = await br.newPage({ viewport: { width: 1280, height: 900 } });
    const outside = [], bad = [];
    page.on('request', (r) => { if (!r.url().startsWith(origin + PREFIX + '/')) outside.push(r.url()); });
    page.on('response', (r) => { if (r.status() >= 400) bad.push(`${r.status()} ${r.url()}`); });
    await page.goto(purl);
    await page.waitForSelector('body[data-ready="1"]', { timeout: 60000 * SLOW });
    await waitFor(page, () => window.__ssb4d.drawn.length > 0, null, { timeout: 30000 * SLOW });
    check(true, 'the page under the prefix loads and draws (' + await page.textContent('#status') + ')');
    check(outside.length === 0, 'every request under the prefix: ' + outside.slice(0, 3).join(' '));
    check(bad.length === 0, 'no 4xx/5xx under the prefix: ' + bad.slice(0, 3).join(' '));
  } catch (e) {
    fails.push('prefix: ' + e.message);
  } finally {
    await br.close();
    srv.kill('SIGTERM');
    check((await gone) === 0, 'the prefixed server exits 0 on SIGTERM');
  }
}
console.log(`browser test: ${((Date.now() - t0) / 1000).toFixed(1)} s; screenshots in ${WORK}`);
if (fails.length) {
  console.log(`${fails.length} check(s) failed`);
  process.exit(1);
}
console.log('all checks passed');
process.exit(0);
