// browser.mjs — `ssb4d view` in a real browser: headless Debian Chromium driven by playwright-core
// (never a downloaded browser), on the tiny simulated dataset.
// usage: node browser.mjs SSB4D_BINARY WORKDIR   (exit 0 pass, 1 fail, 77 skip: no chromium/node_modules)
// Checks: the page loads and the fit finishes; a burst of slider input events changes the image and
// only the latest request's image is drawn; on release the displayed loss equals `ssb4d reconstruct
// --json`'s for the same values; the FFT view toggles; a drawn region is refitted; Fit Regions draws
// its map; Save calibration writes a file that `ssb4d reconstruct --calibration` reproduces bit for
// bit (the viewer's image and loss at those values); screenshots are kept in WORKDIR.
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
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  const external = [];
  page.on('request', (r) => { if (!r.url().startsWith(url.split('/?')[0])) external.push(r.url()); });
  page.on('pageerror', (e) => fails.push('page error: ' + e.message));
  await page.goto(url);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 90000 * SLOW });
  check(await page.$eval('#fit', (e) => e.dataset.done) === '1', 'page loads and the fit finishes');
  await waitFor(page, () => window.__ssb4d.lastLoss !== null, null, { timeout: 30000 * SLOW });
  const before = await page.$eval('#img', (c) => c.toDataURL());

  // A burst of input events on C10 (one per animation frame), then the release.
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
    return t.sent.length === n && t.drawn.length && t.drawn[t.drawn.length - 1].seq === t.sent[n - 1].seq;
  }, burst, { timeout: 30000 * SLOW });
  const tr = await page.evaluate(() => window.__ssb4d);
  const drags = tr.sent.filter((s) => !s.release).length;
  check(drags >= 10, `the burst sent ${drags} drag previews`);
  check(tr.drawn.every((d) => d.seq === d.latest), 'every image drawn was the latest request\'s');
  check(tr.drawn[tr.drawn.length - 1].release, 'the last image drawn is the release\'s');
  const after = await page.$eval('#img', (c) => c.toDataURL());
  check(after !== before, 'the burst changed the image');

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

  // FFT toggle.
  const nDrawn = tr.drawn.length;
  await page.selectOption('#view', 'fft');
  await waitFor(page, (n) => window.__ssb4d.drawn.length > n, nDrawn, { timeout: 20000 * SLOW });
  const fft = await page.$eval('#img', (c) => c.toDataURL());
  check(fft !== after, 'FFT view shows another image');
  await page.screenshot({ path: path.join(WORK, 'view_browser_fft.png') });
  await page.selectOption('#view', 'phase');
  await waitFor(page, (n) => window.__ssb4d.drawn.length > n + 1, nDrawn, { timeout: 20000 * SLOW });
  check(await page.$eval('#img', (c) => c.toDataURL()) === after, 'back to phase: the same image');

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
  const fitC10 = await page.evaluate(async () => {
    const r = await fetch('/api/state', { headers: { 'X-SSB4D-Token': new URLSearchParams(location.search).get('token') } });
    return (await r.json()).fit.result.C10_nm;
  });
  check(Math.abs(Number(await page.$eval('#C10_num', (e) => e.value)) - fitC10) < 1e-3, 'Reset returns to the fit');

  // A region drawn over the whole (32x32) field, refitted; Fit Regions on a 1x1 grid.
  const box = await (await page.$('#overlay')).boundingBox();
  await page.mouse.move(box.x + 1, box.y + 1);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await page.mouse.move(box.x + box.width - 1, box.y + box.height - 1);
  await page.mouse.up();
  check((await page.textContent('#rect')).includes('rows 0:32'), 'rectangle drawn: ' + await page.textContent('#rect'));
  await page.click('#crop_refit');
  await waitFor(page, () => document.getElementById('region_result').dataset.c10 !== undefined, null, { timeout: 60000 * SLOW });
  const c10 = Number(await page.$eval('#region_result', (e) => e.dataset.c10));
  check(Math.abs(c10 + 9.9) < 0.5, `region refitted: C10 ${c10.toFixed(3)} nm`);
  await page.fill('#grid_rows', '1');
  await page.fill('#grid_cols', '1');
  await waitFor(page, () => !document.getElementById('fit_regions').disabled, null, { timeout: 30000 * SLOW });
  await page.click('#fit_regions');
  await waitFor(page, () => document.getElementById('regionmap').dataset.cells === '1', null, { timeout: 60000 * SLOW });
  check(true, 'Fit Regions drew its map');

  // Save calibration; reconstruct --calibration gives the viewer's image and loss bit for bit.
  await page.click('#save');
  await waitFor(page, () => document.getElementById('saved').dataset.path, null, { timeout: 30000 * SLOW });
  const saved = path.resolve(work, await page.$eval('#saved', (e) => e.dataset.path));
  check(fs.existsSync(saved), 'Save calibration wrote ' + saved);
  const rec2 = JSON.parse(execFileSync(BIN, ['reconstruct', 'x.npy', '--json', '-q', '--force', '-o', 'r2.npy',
    '--calibration', saved], { cwd: work }));
  const viewer = await page.evaluate(async () => {
    const token = new URLSearchParams(location.search).get('token');
    const r = await fetch('/api/preview', { method: 'POST', headers: { 'X-SSB4D-Token': token, 'Content-Type': 'application/json' },
      body: JSON.stringify({ upsample: 1, want_loss: true }) }); // no seq: unordered, always computed
    return { loss: r.headers.get('X-Loss'), bytes: Array.from(new Uint8Array(await r.arrayBuffer())) };
  });
  const a = readNpyF32(path.join(work, 'r2.npy'));
  check(Buffer.from(viewer.bytes).equals(a), `reconstruct --calibration: the viewer's image bit for bit (${a.length} bytes)`);
  check(sameLoss(Number(viewer.loss), rec2.loss), `reconstruct --calibration: the viewer's loss ${viewer.loss} equals reconstruct's ${rec2.loss}`);

  // The calibration view.
  await page.click('#caldetails summary');
  await waitFor(page, () => document.getElementById('calinfo').textContent.includes('radius'), null, { timeout: 10000 * SLOW });
  check(true, 'calibration view: ' + await page.textContent('#calinfo'));
  check(external.length === 0, 'no request leaves the server: ' + external.slice(0, 3).join(' '));
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
console.log(`browser test: ${((Date.now() - t0) / 1000).toFixed(1)} s; screenshots in ${WORK}`);
if (fails.length) {
  console.log(`${fails.length} check(s) failed`);
  process.exit(1);
}
console.log('all checks passed');
process.exit(0);
