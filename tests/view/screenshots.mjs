// screenshots.mjs — the documentation's pictures of the viewer (docs/figures/view-*.png), on the
// built-in dataset: the page at 1920, 1280 and 760 px wide (view-1920.png, view-1280.png,
// view-760.png: the phase at 2x with its colour bar, the fit's results, the Fit Regions map of a
// 2x2 grid), the FFT with its 1/Å scale and the 2α/λ circle (view-fft.png), and the whole page at
// 1280 (view-regions.png), the virtual BF and iDPC views at 1280 (view-virtual-bf.png,
// view-virtual-idpc.png). Not a test.
// usage: node tests/view/screenshots.mjs build/ssb4d docs/figures
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const [BIN, OUT] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));
const { chromium } = await import(path.join(here, 'node_modules', 'playwright-core', 'index.mjs'));
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ssb4d-shots-'));
const server = spawn(path.resolve(BIN), ['view', '--port', '0', '-q'], { cwd: work, stdio: ['ignore', 'pipe', 'inherit'] });
const url = await new Promise((res) => createInterface({ input: server.stdout }).once('line', (l) => res(l.split(' ')[2])));
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1920, height: 1080 } });
const until = async (fn, arg) => { while (!(await page.evaluate(fn, arg))) await new Promise((r) => setTimeout(r, 200)); };
const drawn = () => page.evaluate(() => window.__ssb4d.drawn.length);
const settle = () => new Promise((r) => setTimeout(r, 400)); // the layout follows the window in a frame
const shot = async (name, opts = {}) => {
  await settle();
  await page.screenshot({ path: path.join(OUT, name), ...opts });
  console.log('wrote ' + path.join(OUT, name));
};
await page.goto(url);
await until(() => document.body.dataset.ready === '1');
await until(() => window.__ssb4d.lastLoss !== null);
let n = await drawn();
await page.selectOption('#upsample', '2');
await until((k) => window.__ssb4d.drawn.length > k, n);
await page.selectOption('#cmap', 'viridis');
await page.click('#fit_regions');
await until(() => document.getElementById('regionmap').dataset.cells === '4');
await shot('view-1920.png');
n = await drawn();
await page.selectOption('#view', 'fft');
await until((k) => window.__ssb4d.drawn.length > k, n);
await page.setViewportSize({ width: 1280, height: 800 });
await shot('view-fft.png');
n = await drawn();
await page.selectOption('#view', 'phase');
await until((k) => window.__ssb4d.drawn.length > k, n);
await shot('view-1280.png');
await page.setViewportSize({ width: 760, height: 1000 });
await shot('view-760.png');
await page.setViewportSize({ width: 1280, height: 800 });
await shot('view-regions.png', { fullPage: true });
for (const kind of ['bf', 'idpc']) { // the virtual images, to choose a region on
  n = await drawn();
  await page.selectOption('#view', kind);
  await until((k) => window.__ssb4d.drawn.length > k, n);
  await shot(`view-virtual-${kind}.png`);
}
await browser.close();
server.kill('SIGTERM');
fs.rmSync(work, { recursive: true, force: true });
process.exit(0);
