// gpu_ops.mjs - the worker page's WebGPU kernels (web/gpu: gelu, layernorm, the causal softmax, each with
// its backward) in the system's headless Chromium (playwright-core; SwiftShader where there is no GPU),
// bit for bit against the C reference compiled to WebAssembly (weft.wasm's weft_wasm_run), over shapes that
// cross workgroup edges and values of every kind: ordinary ones, a wide range, ones near the edges of the
// GPU's exact ground (tiny, huge), and subnormals, infinities, NaN and signed zeros. A kernel either returns
// the reference's bits or says it cannot be exact for those values (the tab then computes the op in wasm);
// on ordinary values it must run. Prints, per op, how many cases ran on the GPU and how many it handed back.
//
//   node gpu_ops.mjs --web <build>/web [--chromium PATH]
// Exits 77 (CTest's skip) when Chromium or playwright-core is missing, or the browser has no WebGPU adapter.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const SKIP = 77;
const here = path.dirname(fileURLToPath(import.meta.url));
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
};
const webDir = path.resolve(arg('web', ''));
const chromiumPath = process.env.WEFT_CHROMIUM || arg('chromium', '/usr/bin/chromium');

if (!fs.existsSync(chromiumPath)) {
  console.log(`SKIP: no Chromium at ${chromiumPath} (Debian: apt-get install chromium; or set WEFT_CHROMIUM)`);
  process.exit(SKIP);
}
let chromium;
try {
  ({ chromium } = await import(pathToFileURL(path.join(here, 'node_modules/playwright-core/index.mjs')).href));
} catch (e) {
  console.log(`SKIP: playwright-core is not installed in ${here} (npm ci --prefix ${here}): ${e.message}`);
  process.exit(SKIP);
}
if (!fs.existsSync(path.join(webDir, 'gpu/gpu.js')) || !fs.existsSync(path.join(webDir, 'wasm/weft.wasm'))) {
  console.log(`FAIL: ${webDir} has no gpu/gpu.js or wasm/weft.wasm: build the weft_web target first`);
  process.exit(1);
}

const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.wasm': 'application/wasm',
  '.wgsl': 'text/plain; charset=utf-8' };
const server = http.createServer((req, res) => {
  const rel = decodeURIComponent(new URL(req.url, 'http://localhost').pathname);
  if (rel === '/') {
    res.writeHead(200, { 'content-type': TYPES['.html'] }).end('<!doctype html><title>gpu ops</title>');
    return;
  }
  const file = path.join(webDir, path.normalize(rel));
  if (!file.startsWith(webDir + path.sep)) {
    res.writeHead(403).end();
    return;
  }
  fs.readFile(file, (err, data) => {
    if (err) res.writeHead(404).end();
    else res.writeHead(200, { 'content-type': TYPES[path.extname(file)] || 'application/octet-stream' }).end(data);
  });
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));

const browser = await chromium.launch({
  executablePath: chromiumPath,
  args: ['--headless', '--no-sandbox', '--enable-unsafe-webgpu', '--disable-background-networking', '--no-first-run'],
});
let failed = 0;
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => console.log(`[page error] ${e.message}`));
  await page.goto(`http://127.0.0.1:${server.address().port}/`);
  page.setDefaultTimeout(240000);
  const out = await page.evaluate(inPage);
  if (out.skip) {
    console.log(`SKIP: ${out.skip}`);
    await browser.close();
    server.close();
    process.exit(SKIP);
  }
  console.log(`adapter: ${out.adapter}`);
  for (const line of out.lines) console.log(line);
  failed = out.failures;
} catch (e) {
  console.log(`FAIL: ${e.message}`);
  failed = 1;
}
await browser.close();
server.close();
console.log(failed ? `gpu_ops: ${failed} failed` : 'gpu_ops: all checks passed');
process.exit(failed ? 1 : 0);

// ------------------------------------------------------------------------------------------ in the page

async function inPage() {
  const g = await import('/gpu/gpu.js');
  const gpu = await g.openGpu();
  if (!gpu) return { skip: `no WebGPU adapter: ${g.noGpuReason}` };
  const ready = await g.prepareTx(gpu);
  const lines = [];
  let failures = 0;
  const fail = (what) => {
    failures++;
    lines.push(`FAIL ${what}`);
  };
  for (const [op, why] of Object.entries(ready.why)) fail(`${op}: its kernel did not compile: ${why}`);
  if (failures) return { adapter: '', lines, failures };
  const { instance } = await WebAssembly.instantiate(await (await fetch('/wasm/weft.wasm')).arrayBuffer(), {});
  const w = instance.exports;

  // The reference: weft.wasm's weft_wasm_run(kind) over the operands (Uint32Arrays of bits; outputs hold
  // their initial values), ip (numbers) and fp (bits). Returns the outputs' bits.
  const ref = (kind, ins, outs, ip, fp = []) => {
    const ptrs = [];
    const put = (a) => {
      const p = w.weft_wasm_alloc(Math.max(4, a.length * 4));
      ptrs.push(p);
      new Uint32Array(w.memory.buffer, p, a.length).set(a);
      return p;
    };
    const pin = ins.map((a) => (a ? put(a) : 0));
    const pout = outs.map((a) => (a ? put(a) : 0));
    const mem = w.memory.buffer;
    new Uint32Array(mem, w.weft_wasm_op_in(), 6).fill(0).set(pin);
    new Uint32Array(mem, w.weft_wasm_op_out(), 4).fill(0).set(pout);
    new BigInt64Array(mem, w.weft_wasm_op_iparam(), 8).fill(0n).set(ip.map(BigInt));
    new Uint32Array(mem, w.weft_wasm_op_fparam(), 8).fill(0).set(fp);
    const st = w.weft_wasm_run(kind);
    const res = outs.map((a, k) => (a ? new Uint32Array(w.memory.buffer, pout[k], a.length).slice() : null));
    ptrs.forEach((p) => w.weft_wasm_free(p));
    if (st) throw new Error(`weft_wasm_run(${kind}) = ${st}`);
    return res;
  };

  // Values, as bits. A seeded generator, so a failure repeats.
  let seed = 12345;
  const rnd = () => ((seed = (seed * 1664525 + 1013904223) >>> 0) / 4294967296);
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  const bits = (x) => ((f32[0] = x), u32[0]);
  const EDGE = [0x80000000, 0, 0x00000001, 0x80400000, 0x007fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001,
    0x7f7fffff, 0xff7fffff, 0x00800000, 0x0c800000];
  const KINDS = {
    normal: () => bits(rnd() * 8 - 4),
    unit: () => bits(rnd() * 2 - 1),
    positive: () => bits(rnd() * 1.5 + 0.25),
    wide: () => bits((rnd() < 0.5 ? -1 : 1) * (1 + rnd()) * 2 ** Math.floor(rnd() * 80 - 40)),
    tiny: () => bits((rnd() < 0.5 ? -1 : 1) * (1 + rnd()) * 2 ** Math.floor(rnd() * 40 - 125)),
    huge: () => bits((rnd() < 0.5 ? -1 : 1) * (1 + rnd()) * 2 ** Math.floor(rnd() * 30 + 97)),
    peaky: () => bits(rnd() * 400 - 200),
    zeros: () => (rnd() < 0.5 ? 0x80000000 : (rnd() < 0.5 ? 0 : bits(rnd() * 2 - 1))),
    edge: () => (rnd() < 0.3 ? EDGE[Math.floor(rnd() * EDGE.length)] : bits(rnd() * 8 - 4)),
  };
  const gen = (n, kind) => {
    const a = new Uint32Array(n);
    for (let i = 0; i < n; i++) a[i] = KINDS[kind]();
    return a;
  };
  const stats = {};
  // One case: the GPU's answer (or null) against the reference's, output by output.
  const compare = (op, what, got, want, mustRun) => {
    const s = (stats[op] ||= { cases: 0, ran: 0, handed: 0 });
    s.cases++;
    if (!got) {
      s.handed++;
      if (mustRun) fail(`${op} ${what}: the GPU handed back values it must run`);
      return;
    }
    s.ran++;
    for (const [name, a, b] of want) {
      const x = got[name];
      if (!x || x.length !== b.length) {
        fail(`${op} ${what}: ${name} has ${x ? x.length : 'no'} elements, the reference ${b.length}`);
        return;
      }
      for (let i = 0; i < b.length; i++) {
        if (x[i] !== b[i]) {
          fail(`${op} ${what}: ${name}[${i}] is 0x${x[i].toString(16)} on the GPU, 0x${b[i].toString(16)} in the reference` +
            (a ? ` (input 0x${a[i % a.length].toString(16)})` : ''));
          return;
        }
      }
    }
  };
  const ordinary = (k) => k === 'normal' || k === 'unit' || k === 'positive' || k === 'zeros';

  for (const n of [1, 63, 64, 65, 1000, 4099]) {
    for (const kind of ['normal', 'wide', 'tiny', 'huge', 'zeros', 'edge']) {
      const x = gen(n, kind);
      const dy = gen(n, kind === 'edge' ? 'normal' : kind);
      const [y] = ref(12, [x], [new Uint32Array(n)], [n]);
      compare('gelu', `n=${n} ${kind}`, await g.txGpu(gpu, 'gelu', { x, n }), [['y', x, y]], ordinary(kind));
      const [dx] = ref(13, [x, dy], [new Uint32Array(n)], [n]);
      compare('gelu_backward', `n=${n} ${kind}`, await g.txGpu(gpu, 'gelu_backward', { x, dy, n }), [['dx', x, dx]],
        ordinary(kind));
    }
  }
  for (const [N, C] of [[1, 1], [3, 8], [5, 63], [37, 300], [64, 768]]) {
    for (const kind of ['normal', 'wide', 'tiny', 'huge', 'zeros', 'edge']) {
      const x = gen(N * C, kind);
      const gamma = gen(C, 'positive');
      const beta = gen(C, 'unit');
      const eps = bits(1e-5);
      const [y, mean, rstd] = ref(10, [x, gamma, beta], [new Uint32Array(N * C), new Uint32Array(N), new Uint32Array(N)],
        [N, C], [eps]);
      const what = `N=${N} C=${C} ${kind}`;
      const mustRun = ordinary(kind);
      compare('layernorm', what, await g.txGpu(gpu, 'layernorm', { x, gamma, beta, N, C, eps }),
        [['y', x, y], ['mean', null, mean], ['rstd', null, rstd]], mustRun);
      const dy = gen(N * C, kind === 'edge' ? 'normal' : kind);
      const dg0 = gen(C, 'unit');
      const db0 = gen(C, 'unit');
      const [dx, dgamma, dbeta] = ref(11, [dy, x, mean, rstd, gamma], [new Uint32Array(N * C), dg0.slice(), db0.slice()], [N, C]);
      compare('layernorm_backward', what,
        await g.txGpu(gpu, 'layernorm_backward', { dy, x, mean, rstd, gamma, dgamma: dg0, dbeta: db0, N, C }),
        [['dx', x, dx], ['dgamma', null, dgamma], ['dbeta', null, dbeta]], mustRun);
      // Without the parameter gradients: dx alone.
      const got = await g.txGpu(gpu, 'layernorm_backward', { dy, x, mean, rstd, gamma, dgamma: null, dbeta: null, N, C });
      compare('layernorm_backward', `${what} (dx only)`, got, [['dx', x, dx]], mustRun);
      if (got && (got.dgamma || got.dbeta)) fail(`layernorm_backward ${what}: gradients returned that were not asked for`);
    }
  }
  for (const [R, T] of [[1, 1], [3, 4], [2, 65], [4, 128]]) {
    for (const kind of ['normal', 'wide', 'tiny', 'huge', 'peaky', 'zeros', 'edge']) {
      const n = R * T * T;
      const scores = gen(n, kind);
      const scale = bits(kind === 'peaky' ? 1 : 0.35);
      const [probs] = ref(16, [scores], [new Uint32Array(n)], [R, T], [scale]);
      const what = `R=${R} T=${T} ${kind}`;
      compare('causal_softmax', what, await g.txGpu(gpu, 'causal_softmax', { scores, R, T, scale }),
        [['probs', scores, probs]], ordinary(kind));
      // The backward of the forward's own probabilities (when they are finite), else of the values given.
      const p = kind === 'edge' || kind === 'huge' ? scores : probs;
      const dprobs = gen(n, kind === 'edge' ? 'normal' : kind === 'peaky' ? 'unit' : kind);
      const [dscores] = ref(17, [p, dprobs], [new Uint32Array(n)], [R, T], [scale]);
      compare('causal_softmax_backward', what, await g.txGpu(gpu, 'causal_softmax_backward', { probs: p, dprobs, R, T, scale }),
        [['dscores', p, dscores]], ordinary(kind));
    }
  }
  for (const [op, s] of Object.entries(stats)) {
    lines.push(`${op}: ${s.cases} cases, ${s.ran} on the GPU with the reference's bits, ${s.handed} handed back to the CPU`);
  }
  const i = gpu.adapterInfo;
  return { adapter: [i.vendor, i.architecture, i.description].filter((x) => x).join(' '), lines, failures };
}
