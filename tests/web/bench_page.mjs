// bench_page.mjs - drives the Bench page (web/bench) in the system's headless Chromium through
// playwright-core (never a browser download), serving the assembled page folder with a small static server.
//
//   node bench_page.mjs --web <build>/web --native-hash <native_hash program> --screenshot <file.png> [--no-gpu]
//
// Checks: a WebGPU adapter is found; both lanes' curves have every point; the router (weft.wasm) picks the
// lane measured faster at every size; the WebGPU and WebAssembly result hashes equal the native CPU lane's.
// Prints the routed / faster-lane ratio per size (a benchmark figure: asserted only loosely).
// With --no-gpu the page is opened with navigator.gpu hidden: it must say so, explain that CPU-wasm is the
// only backend, route every size there, and still match the native bits.
// Exits 77 (CTest's skip) when Chromium or playwright-core is missing, saying which.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const SKIP = 77;
const here = path.dirname(fileURLToPath(import.meta.url));

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const webDir = path.resolve(arg('web', ''));
const nativeHash = arg('native-hash', '');
const shotPath = path.resolve(arg('screenshot', 'bench_page.png'));
const chromiumPath = process.env.WEFT_CHROMIUM || arg('chromium', '/usr/bin/chromium');
const timeoutMs = 1000 * Number(process.env.WEFT_BENCH_TIMEOUT_S || 240);
const noGpu = process.argv.includes('--no-gpu');
const query = process.env.WEFT_BENCH_QUERY || (noGpu ? '?sizes=16,32,64,128' : '');

const failures = [];
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'}  ${what}`);
  if (!ok) failures.push(what);
}

if (!fs.existsSync(chromiumPath)) {
  console.log(`SKIP: no Chromium at ${chromiumPath} (Debian: apt-get install chromium; or set WEFT_CHROMIUM)`);
  process.exit(SKIP);
}
let chromium;
try {
  ({ chromium } = await import(pathToFileURL(path.join(here, 'node_modules/playwright-core/index.mjs')).href));
} catch (e) {
  console.log(`SKIP: playwright-core is not installed in ${here} (run: npm ci --prefix ${here}; ./build.sh does): ${e.message}`);
  process.exit(SKIP);
}
if (!fs.existsSync(path.join(webDir, 'bench/index.html')) || !fs.existsSync(path.join(webDir, 'wasm/weft.wasm'))) {
  console.log(`FAIL: ${webDir} has no bench/index.html or wasm/weft.wasm: build the weft_web target first`);
  process.exit(1);
}

// The native CPU lane's hashes of the same generated inputs.
const native = JSON.parse(execFileSync(nativeHash, { encoding: 'utf8' }));
console.log(`native CPU lane hashes: ${JSON.stringify(native)}`);

// A static server for the assembled folder (only files under it; nothing is listed).
const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.css': 'text/css', '.wasm': 'application/wasm', '.wgsl': 'text/plain; charset=utf-8', '.json': 'application/json' };
const server = http.createServer((req, res) => {
  let rel = decodeURIComponent(new URL(req.url, 'http://localhost').pathname);
  if (rel.endsWith('/')) rel += 'index.html';
  const file = path.join(webDir, path.normalize(rel));
  if (!file.startsWith(webDir + path.sep)) {
    res.writeHead(403).end();
    return;
  }
  fs.readFile(file, (err, data) => {
    if (err) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    // Cross-origin isolation gives the page a 5 us clock instead of 100 us (and it costs a static page nothing).
    res.writeHead(200, { 'content-type': TYPES[path.extname(file)] || 'application/octet-stream', 'cache-control': 'no-store',
      'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp' });
    res.end(data);
  });
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const url = `http://127.0.0.1:${server.address().port}/bench/${query}`;

const browser = await chromium.launch({
  executablePath: chromiumPath,
  args: ['--headless', '--no-sandbox', '--enable-unsafe-webgpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic',
    ...(process.env.WEFT_CHROMIUM_ARGS || '').split(' ').filter(Boolean)],
});
let result = null;
try {
  // A fresh context: its own temporary profile, nothing kept between runs.
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1 });
  if (noGpu) await context.addInitScript(() => Object.defineProperty(Navigator.prototype, 'gpu', { get: () => undefined }));
  const page = await context.newPage();
  page.on('pageerror', (e) => console.log(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/favicon/.test(m.text())) console.log(`page console: ${m.text()}`);
  });
  console.log(`opening ${url} in ${chromiumPath}`);
  await page.goto(url);
  await page.waitForFunction(() => window.weftBench && window.weftBench.done, null, { timeout: timeoutMs, polling: 250 });
  result = await page.evaluate(() => JSON.parse(JSON.stringify(window.weftBench)));
  result.notice = await page.evaluate(() => (document.getElementById('notice').hidden ? '' : document.getElementById('notice').textContent));
  await page.screenshot({ path: shotPath, fullPage: true });
  console.log(`screenshot: ${shotPath}`);
} finally {
  await browser.close();
  server.close();
}

check(!result.error, `the page ran to the end${result.error ? `: ${result.error}` : ''}`);
const a = result.adapter;
if (noGpu) {
  check(!a && result.noGpuReason !== '', `no adapter, and the page says why: ${result.noGpuReason}`);
  check(/only backend/.test(result.notice), `the page explains that CPU-wasm is then the only backend: "${result.notice}"`);
} else {
  check(Boolean(a), `a WebGPU adapter was found${a ? `: ${[a.vendor, a.architecture, a.description].filter(Boolean).join(' / ')}` : ` (none: ${result.noGpuReason})`}`);
}
check(result.points.length > 0, `${result.points.length} sizes measured`);

console.log('\n     n   WebGPU ms  CPU-wasm ms  pick       routed ms  faster ms  routed/faster');
for (const p of result.points) {
  console.log(`${String(p.n).padStart(6)}  ${(p.gpu_ms ?? NaN).toFixed(3).padStart(10)}  ${(p.wasm_ms ?? NaN).toFixed(3).padStart(11)}` +
    `  ${String(p.routed_lane).padEnd(8)}  ${(p.routed_ms ?? NaN).toFixed(3).padStart(10)}  ${(p.faster_ms ?? NaN).toFixed(3).padStart(9)}` +
    `  ${(p.ratio ?? NaN).toFixed(3).padStart(13)}`);
}
console.log(`routed / faster lane, worst size: ${result.ratio_max?.toFixed(3)}x (the figure's target is <= 1.10x)\n`);

// One lane: nothing to choose between, so the page holds the ratio to no target (no red figure).
check(result.ratio_target === !noGpu, `the routed/faster target is ${noGpu ? 'not ' : ''}applied (${result.ratio_target})`);
for (const p of result.points) {
  // a lane over the page's time budget (?max_seconds=) at a size is left out there, and says so
  if (p.skipped?.length) {
    check(p.skipped.every((k) => p[`${k}_ms`] == null), `n = ${p.n}: over the ${result.max_seconds} s budget, not measured: ${p.skipped.join(', ')}`);
    continue;
  }
  if (noGpu) check(p.gpu_ms == null && p.wasm_ms > 0 && p.routed_ms > 0, `n = ${p.n}: the CPU-wasm curve and the routed run have the point`);
  else check(p.gpu_ms > 0 && p.wasm_ms > 0 && p.routed_ms > 0, `n = ${p.n}: both curves and the routed run have the point`);
  const faster = !noGpu && p.gpu_ms < p.wasm_ms ? 'gpu' : 'wasm';
  check(p.routed_lane === faster, `n = ${p.n}: the router picked ${p.routed_lane}, the lane measured faster (${faster})`);
  // Loose on purpose: a timing figure on a shared machine, the tight target is printed above.
  check(p.ratio > 0 && p.ratio <= 2, `n = ${p.n}: routed within 2x of the faster lane (${p.ratio?.toFixed(3)}x)`);
}
for (const [shape, h] of Object.entries(native)) {
  check(result.hashes.wasm?.[shape] === h, `${shape}: WebAssembly result bits equal the native CPU lane's (${result.hashes.wasm?.[shape]} vs ${h})`);
  if (!noGpu) check(result.hashes.gpu?.[shape] === h, `${shape}: WebGPU result bits equal the native CPU lane's (${result.hashes.gpu?.[shape]} vs ${h})`);
}

if (failures.length) {
  console.log(`\n${failures.length} check(s) failed`);
  process.exit(1);
}
console.log('\nall checks passed');
