// refine.mjs — the viewer's Refine (issue 40, docs/refine.md "Viewer") in a real browser: headless
// Debian Chromium driven by playwright-core, on the tiny simulated dataset. A rectangle drawn on
// the image, Refine clicked with two iterations: the job runs (the busy state disables the
// button), its answer fills the result line, the projected phase is drawn with its colour bar, the
// slice slider walks the slices (api/refine/image?kind=N) and back; the state carries the record;
// the API answers an image asked for before any refinement with 409 and refuses a bad body (no
// rect, slices -1, iterations 1e9, an empty thickness range, a region outside) with 400; Save then writes the calibration file's "refine" section; a screenshot is kept in WORKDIR
// (view_refine.png).
// usage: node refine.mjs SSB4D_BINARY WORKDIR   (exit 0 pass, 1 fail, 77 skip: no chromium/node_modules)
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const [BIN, WORK] = process.argv.slice(2).map((a) => path.resolve(a));
const here = path.dirname(fileURLToPath(import.meta.url));
const CHROMIUM = '/usr/bin/chromium';
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

// page.waitForFunction evaluates strings, which the page's CSP forbids: poll.
async function waitFor(page, fn, arg, timeout = 120000) {
  const end = Date.now() + timeout;
  for (;;) {
    if (await page.evaluate(fn, arg)) return;
    if (Date.now() > end) throw new Error('timed out waiting for ' + fn.toString().slice(0, 120));
    await new Promise((r) => setTimeout(r, 100));
  }
}

const t0 = Date.now();
const work = path.join(WORK, 'view_refine_test');
fs.rmSync(work, { recursive: true, force: true });
fs.mkdirSync(work, { recursive: true });
execFileSync(BIN, ['simulate', '--preset', 'tiny', '-o', 'x.npy', '-q'], { cwd: work });
const server = spawn(BIN, ['view', 'x.npy', '--port', '0', '-q'], { cwd: work, stdio: ['ignore', 'pipe', 'inherit'] });
const url = await new Promise((res, rej) => {
  createInterface({ input: server.stdout }).once('line', (l) => res(l.split(' ')[2]));
  setTimeout(() => rej(new Error('no URL printed')), 30000);
});
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(url);
  await waitFor(page, () => document.body.dataset.ready === '1');
  // The API first: no image before a refinement, a bad body refused.
  const api = (p, body) => page.evaluate(async ([p, body]) => {
    const token = new URLSearchParams(location.search).get('token');
    const r = await fetch(p, body === null ? { headers: { 'X-SSB4D-Token': token } }
      : { method: 'POST', headers: { 'X-SSB4D-Token': token, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    return { status: r.status, text: await r.text() };
  }, [p, body]);
  check((await api('api/refine/image?kind=projected', null)).status === 409, 'no image before a refinement (409)');
  let a = await api('api/refine', {});
  check(a.status === 400 && /rect/.test(a.text), `a refine without rect is refused (${a.status} ${a.text})`);
  a = await api('api/refine', { rect: [0, 8, 0, 8], slices: -1 });
  check(a.status === 400 && /slices/.test(a.text), `slices -1 is refused (${a.status} ${a.text})`);
  a = await api('api/refine', { rect: [0, 8, 0, 8], iterations: 1e9 });
  check(a.status === 400 && /iterations/.test(a.text), `iterations 1e9 is refused (${a.status} ${a.text})`);
  a = await api('api/refine', { rect: [0, 8, 0, 8], thickness_range_nm: [5, 1] });
  check(a.status === 400 && /thickness_range_nm/.test(a.text), `an empty thickness range is refused (${a.status})`);
  a = await api('api/refine', { rect: [0, 99, 0, 8] });
  check(a.status === 400 && /inside/.test(a.text), `a region outside the scan is refused (${a.status})`);

  // Draw a rectangle on the image: its middle half.
  const b = await (await page.$('#overlay')).boundingBox();
  await page.mouse.move(b.x + b.width / 4, b.y + b.height / 4);
  await page.mouse.down();
  await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2);
  await page.mouse.move(b.x + 3 * b.width / 4, b.y + 3 * b.height / 4);
  await page.mouse.up();
  const rectText = await page.$eval('#rect', (e) => e.textContent);
  check(/rows 8:24, cols 8:24/.test(rectText), `the drawn region (${rectText})`);
  await page.fill('#ref_iter', '2');
  await page.fill('#ref_slices', '3');
  await page.fill('#ref_tlo', '2');
  await page.fill('#ref_thi', '8');
  check(!(await page.$eval('#refine', (e) => e.disabled)), 'Refine is enabled when idle');
  await page.click('#refine');
  await waitFor(page, () => document.getElementById('refinebox').dataset.done === '1');
  const res = await page.$eval('#refine_result', (e) => e.textContent);
  check(/C10 .* nm, C12 .*tilt .* mrad, .* nm in 3 slices/.test(res), `the result line (${res})`);
  check(await page.$eval('#refineview', (e) => e.classList.contains('has-image')), 'the refined image is shown');
  check(await page.$eval('#refine_img', (e) => e.dataset.kind) === 'projected', 'the projected phase first');
  check(await page.$eval('#refine_slice', (e) => e.max) === '2', 'the slice slider spans 3 slices');
  // The slider: slice 1 (index 0), the last, back to the projected phase.
  for (const [v, kind, label] of [['0', '0', /slice 1 of 3/], ['2', '2', /slice 3 of 3/], ['-1', 'projected', /projected/]]) {
    await page.$eval('#refine_slice', (e, v) => { e.value = v; e.dispatchEvent(new Event('input')); }, v);
    await waitFor(page, (k) => document.getElementById('refine_img').dataset.kind === k, kind);
    const l = await page.$eval('#refine_slice_label', (e) => e.textContent);
    check(label.test(l), `slider at ${v}: ${l}`);
  }
  const st = JSON.parse((await api('api/state', null)).text);
  check(st.refine && st.refine.slices === 3 && JSON.stringify(st.refine.region) === '[8,24,8,24]',
    'the state carries the refinement\'s record');
  for (const k of ['C10_nm', 'C12_nm', 'phi12_deg', 'phi12_probe_deg', 'rotation_deg', 'flip', 'tilt_mrad',
    'tilt_scan_mrad', 'thickness_nm', 'slices', 'nll', 'nll_expected', 'nll_history', 'confident', 'warning', 'region'])
    check(k in st.refine, `the record has ${k}`);
  check(!st.job.busy && !(await page.$eval('#refine', (e) => e.disabled)), 'Refine is enabled again after the job');
  const img = await api('api/refine/image?kind=7', null);
  check(img.status === 400, `a slice out of range is refused (${img.status})`);
  // Save: the calibration file records the refinement.
  await page.fill('#savename', 'refined.json');
  await page.click('#save');
  await waitFor(page, () => !!document.getElementById('saved').dataset.path);
  const cal = JSON.parse(fs.readFileSync(path.join(work, 'refined.json'), 'utf8'));
  check(cal.refine && cal.refine.slices === 3 && JSON.stringify(cal.refine.region) === '[8,24,8,24]',
    'Save writes the "refine" section');
  check(cal.refine.tilt_refined === true && cal.refine.thickness_refined === true && st.refine.tilt_refined === true &&
    st.refine.thickness_refined === true && !/not refined/.test(res), 'three slices refine the tilt and the thickness');
  // One slice: the tilt and the thickness repeat the start, and every door says so.
  await page.fill('#ref_slices', '1');
  await page.click('#refine');
  await waitFor(page, () => document.getElementById('refinebox').dataset.done === '1');
  const res1 = await page.$eval('#refine_result', (e) => e.textContent);
  check(/in 1 slices? \(tilt and thickness not refined: the start's values, one slice has no depth\)/.test(res1),
    `the one-slice result line says what was not refined (${res1})`);
  const st1 = JSON.parse((await api('api/state', null)).text);
  check(st1.refine.slices === 1 && st1.refine.tilt_refined === false && st1.refine.thickness_refined === false,
    'the one-slice record says the tilt and thickness were not refined');
  await page.screenshot({ path: path.join(WORK, 'view_refine.png'), fullPage: true });
  check(errors.length === 0, 'no page errors' + (errors.length ? ': ' + errors.join('; ') : ''));
} catch (e) {
  check(false, 'the test ran: ' + e.message);
} finally {
  await browser.close();
  server.kill('SIGTERM');
}
console.log(`refine browser test: ${((Date.now() - t0) / 1000).toFixed(1)} s; screenshot ${path.join(WORK, 'view_refine.png')}`);
process.exit(fails.length ? 1 : 0);
