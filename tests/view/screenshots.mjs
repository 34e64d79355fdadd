// screenshots.mjs — the documentation's pictures of the viewer (docs/figures/view-*.png), on the
// built-in dataset: the phase at 2x, its FFT, and the Fit Regions map of a 2x2 grid. Not a test.
// usage: node tests/view/screenshots.mjs build/ssb4d docs/figures
import { spawn } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const [BIN, OUT] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));
const { chromium } = await import(path.join(here, 'node_modules', 'playwright-core', 'index.mjs'));
const server = spawn(path.resolve(BIN), ['view', '--port', '0', '-q'], { cwd: '/tmp', stdio: ['ignore', 'pipe', 'inherit'] });
const url = await new Promise((res) => createInterface({ input: server.stdout }).once('line', (l) => res(l.split(' ')[2])));
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
const until = async (fn, arg) => { while (!(await page.evaluate(fn, arg))) await new Promise((r) => setTimeout(r, 200)); };
await page.goto(url);
await until(() => document.body.dataset.ready === '1');
const drawn = () => page.evaluate(() => window.__ssb4d.drawn.length);
let n = await drawn();
await page.selectOption('#upsample', '2');
await page.selectOption('#cmap', 'viridis');
await until((k) => window.__ssb4d.drawn.length > k, n);
await page.screenshot({ path: path.join(OUT, 'view-phase.png') });
n = await drawn();
await page.selectOption('#view', 'fft');
await until((k) => window.__ssb4d.drawn.length > k, n);
await page.screenshot({ path: path.join(OUT, 'view-fft.png') });
await page.selectOption('#view', 'phase');
await page.click('#fit_regions');
await until(() => document.getElementById('regionmap').dataset.cells === '4');
await page.screenshot({ path: path.join(OUT, 'view-regions.png'), fullPage: true });
await browser.close();
server.kill('SIGTERM');
process.exit(0);
