// browser_lane_tab.mjs - opens the worker page in the system's headless Chromium (playwright-core, never a
// browser download; a fresh profile each run) so that a test's fabric gets a browser lane, then takes
// commands on stdin, one per line, answering each on stdout:
//
//   node browser_lane_tab.mjs --url http://127.0.0.1:PORT/worker/ [--chromium PATH] [--insecure]
//   (--insecure: accept the server's self-signed certificate, for a test fabric serving https;
//    --no-webgpu: a browser without WebGPU, whose tab computes in JavaScript;
//    --corrupt-wgsl FILE[,FILE]: the page gets these kernels of web/gpu changed so that they compute wrong
//    bits - gelu_exact.wgsl (0.5 x made 0.50000006 x) or matmul_exact.wgsl (every product's last bit
//    flipped) - as a GPU whose compiler got them wrong would)
//   -> "ready <device>"  once the page is connected and serving (or "SKIP <why>" and exit 77)
//   close [ms]           closes the page after ms milliseconds (default 0)      -> "closed"
//   open                 opens the worker page again in a new tab               -> "ready <device>"
//   foreign WSURL        from a page of another origin, dials the fabric's WebSocket as the worker page
//                        would: -> "foreign open" or "foreign refused"
//   quit (or EOF)        closes the browser and exits 0
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';

const SKIP = 77;
const here = path.dirname(fileURLToPath(import.meta.url));
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
};
const url = arg('url', '');
const chromiumPath = process.env.WEFT_CHROMIUM || arg('chromium', '/usr/bin/chromium');
const say = (line) => process.stdout.write(`${line}\n`);

if (!fs.existsSync(chromiumPath)) {
  say(`SKIP no Chromium at ${chromiumPath} (Debian: apt-get install chromium; or set WEFT_CHROMIUM)`);
  process.exit(SKIP);
}
let chromium;
try {
  ({ chromium } = await import(pathToFileURL(path.join(here, 'node_modules/playwright-core/index.mjs')).href));
} catch (e) {
  say(`SKIP playwright-core is not installed in ${here} (npm ci --prefix ${here}; ./build.sh does it)`);
  process.exit(SKIP);
}

const webgpu = process.argv.includes('--no-webgpu') ? ['--disable-features=WebGPU'] : ['--enable-unsafe-webgpu'];
const browser = await chromium.launch({
  executablePath: chromiumPath,
  args: ['--headless', '--no-sandbox', ...webgpu, '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
});
const context = await browser.newContext({ ignoreHTTPSErrors: process.argv.includes('--insecure') });
const CORRUPT = { 'gelu_exact.wgsl': [['weft_mul(0.5, x)', 'weft_mul(0.50000006, x)']],
  'matmul_exact.wgsl': [['^ dims.keep', '^ (dims.keep | 1u)']] };
for (const file of (arg('corrupt-wgsl', '') || '').split(',').filter((x) => x)) {
  if (!CORRUPT[file]) {
    say(`FAIL --corrupt-wgsl: no rule for ${file} (${Object.keys(CORRUPT).join(', ')})`);
    process.exit(1);
  }
  await context.route(`**/gpu/${file}`, async (route) => {
    const resp = await route.fetch();
    let text = await resp.text();
    for (const [from, to] of CORRUPT[file]) {
      if (!text.includes(from)) process.stderr.write(`[driver] ${file} has no '${from}' to corrupt\n`);
      text = text.split(from).join(to);
    }
    await route.fulfill({ response: resp, body: text });
  });
}
let page = null;

async function open() {
  page = await context.newPage();
  page.on('console', (m) => process.stderr.write(`[tab] ${m.text()}\n`));
  page.on('pageerror', (e) => process.stderr.write(`[tab error] ${e.message}\n`));
  await page.goto(url);
  // Connected means the fabric may now handshake; the device line is what the lane will report.
  await page.waitForFunction(() => window.weftWorker && window.weftWorker.state !== 'starting' &&
    window.weftWorker.state !== 'connecting', null, { timeout: 60000 });
  const st = await page.evaluate(() => window.weftWorker);
  say(`ready ${st.device}`);
}

try {
  await open();
} catch (e) {
  say(`FAIL the worker page did not start: ${e.message}`);
  await browser.close();
  process.exit(1);
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const [cmd, a] = line.trim().split(/\s+/);
  if (cmd === 'close') {
    if (a) await new Promise((r) => setTimeout(r, Number(a)));
    if (page) await page.close();
    page = null;
    say('closed');
  } else if (cmd === 'open') {
    await open();
  } else if (cmd === 'foreign') {
    // Any site a person visits could try this: the fabric must not take it as a tab.
    const server = http.createServer((req, res) => res.end('<!doctype html><title>elsewhere</title>'));
    await new Promise((r) => server.listen(0, '127.0.0.1', r));
    const other = await context.newPage();
    await other.goto(`http://127.0.0.1:${server.address().port}/`);
    const got = await other.evaluate((ws) => new Promise((resolve) => {
      const s = new WebSocket(ws, 'weft');
      s.onopen = () => resolve('open');
      s.onerror = () => resolve('refused');
      setTimeout(() => resolve('refused'), 5000);
    }), a);
    await other.close();
    server.close();
    say(`foreign ${got}`);
  } else if (cmd === 'quit') {
    break;
  }
}
await browser.close();
process.exit(0);
