// bench_tx_web.mjs - a browser tab's two lanes side by side, in one run: each op the worker page has a WebGPU
// kernel for, at GPT-2 small's shapes, on the tab's GPU (web/gpu/gpu.js: upload, kernels, read-back) and on
// its CPU (weft.wasm, the C reference: copy in, run, copy out), timed in alternation (median of repeats),
// with the bits of both checked equal. Prints each op's times and the ratio wasm / WebGPU (> 1: the GPU is
// faster), and for each op the work at which the GPU starts to win (what the page's gpu_min is about).
//
//   node bench/web/bench_tx_web.mjs --web <build>/web [--repeats 7] [--chromium PATH] [--quick]
// Needs playwright-core (npm ci --prefix tests/web) and Chromium; without a GPU, Chromium's WebGPU is
// SwiftShader, a CPU implementation, so the ratios then compare two ways of using the same CPU.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
};
const webDir = path.resolve(arg('web', path.join(here, '../../build/web')));
const chromiumPath = process.env.WEFT_CHROMIUM || arg('chromium', '/usr/bin/chromium');
const repeats = Number(arg('repeats', 7));
const quick = process.argv.includes('--quick');
const { chromium } = await import(pathToFileURL(path.join(here, '../../tests/web/node_modules/playwright-core/index.mjs')).href);

const TYPES = { '.js': 'text/javascript', '.wasm': 'application/wasm', '.wgsl': 'text/plain; charset=utf-8' };
const server = http.createServer((req, res) => {
  const rel = decodeURIComponent(new URL(req.url, 'http://localhost').pathname);
  if (rel === '/') return res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>bench</title>');
  const file = path.join(webDir, path.normalize(rel));
  if (!file.startsWith(webDir + path.sep)) return res.writeHead(403).end();
  fs.readFile(file, (err, data) => (err ? res.writeHead(404).end()
    : res.writeHead(200, { 'content-type': TYPES[path.extname(file)] || 'application/octet-stream' }).end(data)));
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const browser = await chromium.launch({ executablePath: chromiumPath,
  args: ['--headless', '--no-sandbox', '--enable-unsafe-webgpu', '--no-first-run'] });
const page = await browser.newPage();
page.setDefaultTimeout(0);
await page.goto(`http://127.0.0.1:${server.address().port}/`);
const out = await page.evaluate(inPage, { repeats, quick });
for (const line of out) console.log(line);
await browser.close();
server.close();

async function inPage({ repeats, quick }) {
  const g = await import('/gpu/gpu.js');
  const gpu = await g.openGpu();
  if (!gpu) return [`no WebGPU: ${g.noGpuReason}`];
  await g.prepareTx(gpu);
  const { instance } = await WebAssembly.instantiate(await (await fetch('/wasm/weft.wasm')).arrayBuffer(), {});
  const w = instance.exports;
  const i = gpu.adapterInfo;
  const lines = [`adapter: ${[i.vendor, i.architecture, i.description].filter((x) => x).join(' ')}`];
  // The tab's CPU lane: weft_wasm_run over copies in the module's memory, as worker.js does.
  const wasmRun = (kind, ins, outs, ip, fp = []) => {
    const ptrs = [];
    const put = (a) => {
      const p = w.weft_wasm_alloc(Math.max(4, a.length * 4));
      ptrs.push(p);
      new Uint32Array(w.memory.buffer, p, a.length).set(a);
      return p;
    };
    const pin = ins.map(put);
    const pout = outs.map(put);
    const mem = w.memory.buffer;
    new Uint32Array(mem, w.weft_wasm_op_in(), 6).fill(0).set(pin);
    new Uint32Array(mem, w.weft_wasm_op_out(), 4).fill(0).set(pout);
    new BigInt64Array(mem, w.weft_wasm_op_iparam(), 8).fill(0n).set(ip.map(BigInt));
    new Uint32Array(mem, w.weft_wasm_op_fparam(), 8).fill(0).set(fp);
    w.weft_wasm_run(kind);
    const res = outs.map((a, k) => new Uint32Array(w.memory.buffer, pout[k], a.length).slice());
    ptrs.forEach((p) => w.weft_wasm_free(p));
    return res;
  };
  let seed = 7;
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  const gen = (n, lo, hi) => {
    const a = new Uint32Array(n);
    for (let k = 0; k < n; k++) {
      seed = (seed * 1664525 + 1013904223) >>> 0;
      f32[0] = lo + (hi - lo) * (seed / 4294967296);
      a[k] = u32[0];
    }
    return a;
  };
  const eps = (f32[0] = 1e-5, u32[0]);
  const scale = (f32[0] = 0.125, u32[0]);
  const median = (xs) => xs.slice().sort((a, b) => a - b)[xs.length >> 1];
  // GPT-2 small: B = 4, T = 64, C = 768, 12 heads; and a quarter of it, for where the GPU starts to win.
  const shapes = quick ? [[4, 64]] : [[1, 16], [2, 32], [4, 64]];
  for (const [B, T] of shapes) {
    const N = B * T;
    const C = 768;
    const H = 4 * C;
    const cases = [
      ['gelu', N * H, () => {
        const x = gen(N * H, -4, 4);
        return { gpu: () => g.txGpu(gpu, 'gelu', { x, n: N * H }).then((r) => r.y),
          cpu: () => wasmRun(12, [x], [new Uint32Array(N * H)], [N * H])[0] };
      }],
      ['layernorm', N * C, () => {
        const x = gen(N * C, -3, 3);
        const gamma = gen(C, 0.5, 1.5);
        const beta = gen(C, -0.5, 0.5);
        return { gpu: () => g.txGpu(gpu, 'layernorm', { x, gamma, beta, N, C, eps }).then((r) => r.y),
          cpu: () => wasmRun(10, [x, gamma, beta], [new Uint32Array(N * C), new Uint32Array(N), new Uint32Array(N)], [N, C], [eps])[0] };
      }],
      ['causal_softmax', B * 12 * T * T, () => {
        const R = B * 12;
        const s = gen(R * T * T, -4, 4);
        return { gpu: () => g.txGpu(gpu, 'causal_softmax', { scores: s, R, T, scale }).then((r) => r.probs),
          cpu: () => wasmRun(16, [s], [new Uint32Array(R * T * T)], [R, T], [scale])[0] };
      }],
      ['matmul', N * C * C, () => {
        const a = new Float32Array(gen(N * C, -1, 1).buffer);
        const b = new Float32Array(gen(C * C, -1, 1).buffer);
        const cpu = () => {
          const pa = w.weft_wasm_alloc(N * C * 4);
          const pb = w.weft_wasm_alloc(C * C * 4);
          const pc = w.weft_wasm_alloc(N * C * 4);
          new Float32Array(w.memory.buffer, pa, N * C).set(a);
          new Float32Array(w.memory.buffer, pb, C * C).set(b);
          w.weft_wasm_matmul(pa, pb, pc, N, C, C);
          const c = new Uint32Array(w.memory.buffer, pc, N * C).slice();
          [pa, pb, pc].forEach((p) => w.weft_wasm_free(p));
          return c;
        };
        return { gpu: () => g.matmulGpu(gpu, a, b, N, C, C).then((c) => new Uint32Array(c.buffer)), cpu };
      }],
    ];
    for (const [op, work, make] of cases) {
      const run = make();
      const a = await run.gpu(); // warm-up, and the bits
      const b = run.cpu();
      let same = a && a.length === b.length;
      for (let k = 0; same && k < b.length; k++) same = a[k] === b[k];
      const tg = [];
      const tc = [];
      for (let r = 0; r < repeats; r++) {
        let t0 = performance.now();
        await run.gpu();
        tg.push(performance.now() - t0);
        t0 = performance.now();
        run.cpu();
        tc.push(performance.now() - t0);
      }
      const mg = median(tg);
      const mc = median(tc);
      lines.push(`${op.padEnd(15)} B=${B} T=${String(T).padEnd(3)} work ${String(work).padStart(9)}: WebGPU ${mg.toFixed(1).padStart(7)} ms, ` +
        `wasm ${mc.toFixed(1).padStart(7)} ms, wasm/WebGPU ${(mc / mg).toFixed(2)}x, bits ${same ? 'equal' : 'DIFFERENT'}`);
    }
  }
  return lines;
}
