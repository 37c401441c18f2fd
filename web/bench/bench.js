// bench.js - the Bench page: times exact matmuls of growing size on the tab's GPU (web/gpu/gpu.js) and on
// weft's CPU kernels in WebAssembly (weft.wasm), plots both live, lets weft's router (also in weft.wasm)
// pick a lane per size from those measurements, then times the routed runs against both lanes.
//
// Results are published as window.weftBench for tests and for anyone curious:
//   {adapter, noGpuReason, wasm: {isa}, hashes: {gpu, wasm}, points: [{n, gpu_ms, wasm_ms, routed_lane,
//    routed_ms, gpu_ms_pass2, wasm_ms_pass2, faster_ms, ratio}], crossover, ratio_max, done, error}
// URL options: ?sizes=16,32,64  ?repeats=7  ?batch_ms=12  ?max_seconds=2

import { openGpu, matmulExact, noGpuReason } from '../gpu/gpu.js';

const params = new URLSearchParams(location.search);
const SIZES = (params.get('sizes') || '16,32,64,128,192,256,384,512')
  .split(',').map((s) => parseInt(s, 10)).filter((n) => n > 0 && n <= 4096);
const REPEATS = Math.max(3, Math.min(25, parseInt(params.get('repeats') || '7', 10) || 7));
// Each timed sample runs a batch of ops lasting at least this long: a page's clock may tick in 0.1 ms steps.
const BATCH_MS = Math.max(2, parseFloat(params.get('batch_ms') || '12') || 12);
// A lane skips the sizes where one op is predicted (from its last point, by the work) to take longer than
// this: a software adapter's GPU matmuls of a few seconds each would otherwise hold the page for minutes.
const MAX_SECONDS = Math.max(0.05, parseFloat(params.get('max_seconds') || '2') || 2);
// Shapes whose results are hashed and compared with the native CPU lane (tests/web/native_hash.c); not
// multiples of any tile, so every edge path runs.
// The third has edge values (subnormals, overflow to infinity, NaN), where the GPU path is not exact and
// gpu.js computes in JavaScript instead.
const HASH_SHAPES = [[37, 53, 29, false], [128, 128, 128, false], [19, 23, 17, true]];

const LANE_CPU = 0; // lane indices in weft.wasm's fabric
const LANE_GPU = 1;
const LANE_KEY = { [LANE_CPU]: 'wasm', [LANE_GPU]: 'gpu' };
const LANE_LABEL = { wasm: 'CPU-wasm', gpu: 'WebGPU' };

const state = {
  adapter: null,
  noGpuReason: '',
  wasm: null,
  hashes: { gpu: null, wasm: null },
  points: SIZES.map((n) => ({ n, gpu_ms: null, wasm_ms: null, routed_lane: null, routed_ms: null,
    gpu_ms_pass2: null, wasm_ms_pass2: null, faster_ms: null, ratio: null, skipped: [] })),
  crossover: null,
  ratio_max: null,
  // with one lane the router has nothing to choose: its ratio is its own overhead, not held to a target
  ratio_target: null,
  max_seconds: MAX_SECONDS,
  done: false,
  error: null,
};
window.weftBench = state;

const $ = (id) => document.getElementById(id);
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const h = s.length >> 1;
  return s.length % 2 ? s[h] : 0.5 * (s[h - 1] + s[h]);
};
const fmtMs = (ms) => (ms == null ? '…' : ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms >= 1 ? ms.toFixed(2) : ms >= 0.1 ? ms.toFixed(3) : ms.toPrecision(2));
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const nextFrame = () => new Promise((r) => setTimeout(r, 0));
// Before each timed batch: let the page finish drawing (raster and compositing run on the same cores as
// the lanes, and a software GPU does too) so that the batch is timed on a quiet machine.
const settle = () => new Promise((r) => setTimeout(r, 15));

// ------------------------------------------------------------------ deterministic inputs and hashes

// The same generator and hash as tests/web/native_hash.c: change both or neither. Every step is exact in
// float32 and float64, so C and JavaScript produce the same floats.
function hash32(seed, i) {
  let x = (Math.imul(seed, 0x9e3779b9) + Math.imul(i, 0x85ebca6b)) | 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d);
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b);
  x ^= x >>> 16;
  return x >>> 0;
}

const genValue = (seed, i) => ((hash32(seed, i) >>> 8) * 2 ** -24 - 0.5) * 4;

// Edge values: about one in eight subnormal (or zero), one tiny, one huge; the rest as genValue. Every third
// row of A and column of B is also scaled by 2^-66, so where they meet the results are subnormal.
function genEdge(seed, i) {
  const h = hash32(seed + 100, i);
  const v = genValue(seed, i);
  switch (h & 7) {
    case 0: return ((h >>> 8) & 0x7fffff) * 2 ** -149;
    case 1: return v * 2 ** -60;
    case 2: return v * 2 ** 100;
    default: return v;
  }
}

function genMatrix(seed, count) {
  const v = new Float32Array(count);
  for (let i = 0; i < count; i++) v[i] = genValue(seed, i);
  return v;
}

// seed 1 is A (rows scaled), seed 2 is B (columns scaled), as edge_matrix in native_hash.c.
function edgeMatrix(seed, rows, cols) {
  const v = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const x = genEdge(seed, r * cols + c);
      v[r * cols + c] = (seed === 1 ? r : c) % 3 === 0 ? x * 2 ** -66 : x;
    }
  }
  return v;
}

// FNV-1a, 32 bits, over the little-endian bytes of each float (NaNs normalised, though none occur here).
function fnv1a(floats) {
  const bits = new Uint32Array(floats.buffer, floats.byteOffset, floats.length);
  let h = 0x811c9dc5;
  for (let i = 0; i < bits.length; i++) {
    const w = Number.isNaN(floats[i]) ? 0x7fc00000 : bits[i];
    for (let b = 0; b < 4; b++) h = Math.imul(h ^ ((w >>> (8 * b)) & 0xff), 0x01000193);
  }
  return (h >>> 0).toString(16).padStart(8, '0');
}

// --------------------------------------------------------------------------------------- the lanes

async function loadWasm() {
  const url = new URL('../wasm/weft.wasm', import.meta.url);
  const resp = await fetch(url);
  if (!resp.ok) throw new Error(`cannot fetch ${url.pathname}: HTTP ${resp.status} (was the page built with ./build.sh build?)`);
  const { instance } = await WebAssembly.instantiate(await resp.arrayBuffer(), {});
  const e = instance.exports;
  const cstr = (ptr) => {
    const bytes = new Uint8Array(e.memory.buffer, ptr);
    let end = 0;
    while (bytes[end]) end++;
    return new TextDecoder().decode(bytes.subarray(0, end));
  };
  // Operands live in wasm memory for the lane's life at each size; views are made fresh per call because
  // memory.grow detaches the old ones.
  const bufs = { m: 0, k: 0, n: 0, a: 0, b: 0, c: 0 };
  function reserve(m, k, n) {
    if (bufs.m === m && bufs.k === k && bufs.n === n) return;
    for (const p of ['a', 'b', 'c']) if (bufs[p]) e.weft_wasm_free(bufs[p]);
    bufs.a = e.weft_wasm_alloc(Math.max(4, m * k * 4));
    bufs.b = e.weft_wasm_alloc(Math.max(4, k * n * 4));
    bufs.c = e.weft_wasm_alloc(Math.max(4, m * n * 4));
    if (!bufs.a || !bufs.b || !bufs.c) throw new Error(`weft.wasm: out of memory for a ${m}x${k}x${n} matmul`);
    Object.assign(bufs, { m, k, n });
  }
  return {
    isa: cstr(e.weft_wasm_isa()),
    exports: e,
    // The CPU lane as a caller sees it: operands in, result out (the copies are part of the cost).
    matmul(a, b, m, k, n, out) {
      reserve(m, k, n);
      new Float32Array(e.memory.buffer, bufs.a, m * k).set(a.subarray(0, m * k));
      new Float32Array(e.memory.buffer, bufs.b, k * n).set(b.subarray(0, k * n));
      const st = e.weft_wasm_matmul(bufs.a, bufs.b, bufs.c, m, k, n);
      if (st !== 0) throw new Error(`weft.wasm matmul ${m}x${k}x${n} failed with status ${st}`);
      const c = out || new Float32Array(m * n);
      c.set(new Float32Array(e.memory.buffer, bufs.c, m * n));
      return c;
    },
    routerReset: (hasGpu) => e.weft_wasm_router_reset(hasGpu ? 1 : 0),
    routerPoint: (lane, n, seconds) => e.weft_wasm_router_point(lane, n, n, n, seconds),
    route: (n) => e.weft_wasm_route(n, n, n),
    predicted: (lane) => e.weft_wasm_route_predicted(lane),
  };
}

// Times `op` in batches of `iters`; returns the median ms per op over `repeats` batches. An op returns a
// promise (the GPU) or a plain value (CPU-wasm); only promises are awaited, so a microsecond wasm matmul
// is not timed together with a trip through the microtask queue.
async function timeBatches(op, iters, repeats) {
  const per = [];
  for (let r = 0; r < repeats; r++) {
    await settle();
    per.push(await timeOnce(op, iters));
  }
  return median(per);
}

async function timeOnce(op, iters) {
  const t0 = performance.now();
  for (let i = 0; i < iters; i++) {
    const r = op();
    if (r && typeof r.then === 'function') await r;
  }
  return (performance.now() - t0) / iters;
}

// How many ops make a batch of at least BATCH_MS, from one warm-up run (which also compiles pipelines).
async function batchSize(op) {
  await timeOnce(op, 1);
  let iters = 1;
  let t = await timeOnce(op, 1);
  // Quick ops: measure a few together before trusting the estimate.
  if (t < 1) t = await timeOnce(op, Math.max(1, Math.ceil(1 / Math.max(t, 1e-4))));
  iters = Math.max(1, Math.min(200000, Math.ceil(BATCH_MS / Math.max(t, 1e-5))));
  return iters;
}

// ------------------------------------------------------------------------------------------- chart

const SVG_NS = 'http://www.w3.org/2000/svg';
const W = 960;
const H = 440;
const PAD = { left: 78, right: 222, top: 18, bottom: 58 };

function el(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text != null) node.textContent = text;
  return node;
}

function drawChart() {
  const host = $('chart');
  const pts = state.points;
  const times = [];
  for (const p of pts) for (const v of [p.gpu_ms, p.wasm_ms, p.routed_ms]) if (v > 0) times.push(v);
  const xmin = Math.min(...SIZES) / 1.15;
  const xmax = Math.max(...SIZES) * 1.15;
  let ymin = times.length ? Math.min(...times) : 0.001;
  let ymax = times.length ? Math.max(...times) : 100;
  ymin = 10 ** Math.floor(Math.log10(ymin));
  ymax = 10 ** Math.ceil(Math.log10(ymax));
  if (ymax / ymin < 100) ymax = ymin * 100;
  const pw = W - PAD.left - PAD.right;
  const ph = H - PAD.top - PAD.bottom;
  const X = (n) => PAD.left + (Math.log(n / xmin) / Math.log(xmax / xmin)) * pw;
  const Y = (ms) => PAD.top + ph - (Math.log(ms / ymin) / Math.log(ymax / ymin)) * ph;

  const svg = el('svg', { viewBox: `0 0 ${W} ${H}`, xmlns: SVG_NS });
  // y grid: decades labelled, 2 and 5 as light lines
  for (let d = Math.log10(ymin); d <= Math.log10(ymax) + 1e-9; d++) {
    const base = 10 ** d;
    svg.append(el('line', { class: 'grid major', x1: PAD.left, x2: PAD.left + pw, y1: Y(base), y2: Y(base) }));
    svg.append(el('text', { class: 'tick', x: PAD.left - 8, y: Y(base) + 4, 'text-anchor': 'end' }, fmtTick(base)));
    for (const f of [2, 5]) {
      if (base * f < ymax) svg.append(el('line', { class: 'grid', x1: PAD.left, x2: PAD.left + pw, y1: Y(base * f), y2: Y(base * f) }));
    }
  }
  // x ticks: the measured sizes
  for (const n of SIZES) {
    svg.append(el('line', { class: 'grid', x1: X(n), x2: X(n), y1: PAD.top, y2: PAD.top + ph }));
    svg.append(el('text', { class: 'tick', x: X(n), y: PAD.top + ph + 18, 'text-anchor': 'middle' }, String(n)));
  }
  svg.append(el('line', { class: 'axis', x1: PAD.left, x2: PAD.left + pw, y1: PAD.top + ph, y2: PAD.top + ph }));
  svg.append(el('line', { class: 'axis', x1: PAD.left, x2: PAD.left, y1: PAD.top, y2: PAD.top + ph }));
  svg.append(el('text', { class: 'axis-label', x: PAD.left + pw / 2, y: H - 12, 'text-anchor': 'middle' },
    'matrix size n  (n×n · n×n, float32; log scale)'));
  svg.append(el('text', { class: 'axis-label', transform: `translate(18 ${PAD.top + ph / 2}) rotate(-90)`, 'text-anchor': 'middle' },
    'time per matmul, ms (log scale)'));

  // crossover: between the last size routed one way and the first routed the other
  if (state.crossover) {
    const c = state.crossover;
    const x = X(Math.sqrt(c.from_n * c.to_n));
    svg.append(el('line', { class: 'cross-line', x1: x, x2: x, y1: PAD.top, y2: PAD.top + ph }));
    svg.append(el('text', { class: 'cross-text', x: x + 6, y: PAD.top + 14 }, `crossover → ${LANE_LABEL[c.to]}`));
  }

  const series = [
    ...(state.noGpuReason ? [] : [{ key: 'gpu', cls: 'gpu', label: 'WebGPU', get: (p) => p.gpu_ms }]),
    { key: 'wasm', cls: 'wasm', label: 'CPU-wasm', get: (p) => p.wasm_ms },
    { key: 'routed', cls: 'routed', label: 'routed (weft’s pick)', get: (p) => p.routed_ms },
  ];
  for (const s of series) {
    const have = pts.filter((p) => s.get(p) > 0);
    if (have.length > 1) {
      svg.append(el('polyline', { class: `series ${s.cls}`, points: have.map((p) => `${X(p.n)},${Y(s.get(p))}`).join(' ') }));
    }
    for (const p of have) {
      const cx = X(p.n);
      const cy = Y(s.get(p));
      let mark;
      if (s.key === 'routed') {
        mark = el('rect', { class: 'routed', x: cx - 6, y: cy - 6, width: 12, height: 12, transform: `rotate(45 ${cx} ${cy})`, 'stroke-width': 2 });
      } else {
        mark = el('circle', { class: s.cls, cx, cy, r: 4.5 });
      }
      mark.append(el('title', {}, `${s.label}, n = ${p.n}: ${fmtMs(s.get(p))} ms`));
      svg.append(mark);
    }
  }

  // legend, right of the plot
  const lx = PAD.left + pw + 18;
  const ly = PAD.top + 6;
  const legend = el('g', { class: 'legend' });
  const routedAll = pts.every((p) => p.routed_lane);
  const extra = state.crossover ? 26 : routedAll ? 36 : 0;
  legend.append(el('rect', { class: 'legend-box', x: lx - 10, y: ly - 4, width: PAD.right - 18, height: 14 + 26 * series.length + extra, rx: 8 }));
  series.forEach((s, i) => {
    const y = ly + 16 + i * 26;
    if (s.key === 'routed') {
      legend.append(el('line', { class: `series ${s.cls}`, x1: lx, x2: lx + 28, y1: y, y2: y }));
      legend.append(el('rect', { class: 'routed', x: lx + 9, y: y - 5, width: 10, height: 10, transform: `rotate(45 ${lx + 14} ${y})`, 'stroke-width': 2 }));
    } else {
      legend.append(el('line', { class: `series ${s.cls}`, x1: lx, x2: lx + 28, y1: y, y2: y }));
      legend.append(el('circle', { class: s.cls, cx: lx + 14, cy: y, r: 4.5 }));
    }
    legend.append(el('text', { x: lx + 38, y: y + 4 }, s.label));
  });
  if (state.crossover) {
    const y = ly + 16 + series.length * 26;
    legend.append(el('line', { class: 'cross-line', x1: lx + 14, x2: lx + 14, y1: y - 9, y2: y + 9 }));
    legend.append(el('text', { x: lx + 38, y: y + 4 }, 'crossover'));
  } else if (routedAll) {
    // No crossover is a finding too: say it where the eye looks for the marker.
    const y = ly + 16 + series.length * 26;
    const only = pts[0].routed_lane;
    legend.append(el('text', { class: 'cross-text', x: lx, y: y + 4 }, 'no crossover:'));
    legend.append(el('text', { class: 'cross-text', x: lx, y: y + 20 }, `${LANE_LABEL[only]} at every size`));
  }
  svg.append(legend);
  host.replaceChildren(svg);
}

function fmtTick(ms) {
  if (ms >= 1000) return `${ms / 1000} s`;
  if (ms >= 1) return `${ms} ms`;
  if (ms >= 0.001) return `${+(ms * 1000).toPrecision(3)} µs`;
  return `${(ms * 1e6).toPrecision(2)} ns`;
}

// ------------------------------------------------------------------------------------------- table

function drawTable() {
  const body = document.querySelector('#table tbody');
  const rows = state.points.map((p) => {
    const lanes = [p.gpu_ms, p.wasm_ms].filter((v) => v > 0);
    const fastest = lanes.length ? Math.min(...lanes) : null;
    const cls = (v) => (v > 0 && v === fastest && lanes.length > 1 ? 'num faster' : 'num');
    const pick = p.routed_lane ? `<td class="pick-${p.routed_lane}">${LANE_LABEL[p.routed_lane]}</td>` : '<td>…</td>';
    const gflops = p.routed_ms > 0 ? ((2 * p.n ** 3) / (p.routed_ms * 1e6)).toFixed(2) : '…';
    const ratio = p.ratio != null ? `${p.ratio.toFixed(3)}×` : p.skipped.length && state.done ? 'budget' : '…';
    const pending = p.wasm_ms == null ? ' class="pending"' : '';
    return `<tr${pending}><td>${p.n}</td>` +
      `<td class="${cls(p.gpu_ms)}">${state.adapter ? fmtMs(p.gpu_ms) : '—'}</td>` +
      `<td class="${cls(p.wasm_ms)}">${fmtMs(p.wasm_ms)}</td>${pick}` +
      `<td class="num">${fmtMs(p.routed_ms)}</td><td class="num">${fmtMs(p.faster_ms)}</td>` +
      `<td class="num">${ratio}</td><td class="num">${gflops}</td></tr>`;
  });
  body.innerHTML = rows.join('');
}

function redraw() {
  drawChart();
  drawTable();
}

function setStatus(text) {
  $('status').textContent = text;
}

// -------------------------------------------------------------------------------------------- run

async function checkBits(gpu, wasm) {
  const rows = [];
  let allSame = true;
  state.hashes = { gpu: gpu ? {} : null, wasm: {} };
  for (const [m, k, n, edge] of HASH_SHAPES) {
    const key = `${m}x${k}x${n}${edge ? '-edge' : ''}`;
    const a = edge ? edgeMatrix(1, m, k) : genMatrix(1, m * k);
    const b = edge ? edgeMatrix(2, k, n) : genMatrix(2, k * n);
    const hw = fnv1a(wasm.matmul(a, b, m, k, n));
    state.hashes.wasm[key] = hw;
    let hg = null;
    if (gpu) {
      hg = fnv1a(await matmulExact(gpu, a, b, m, k, n));
      state.hashes.gpu[key] = hg;
      if (hg !== hw) allSame = false;
    }
    rows.push(`<tr><td>${m}×${k}×${n}${edge ? ' edge values' : ''}</td><td><code>${hw}</code></td><td><code>${hg || '—'}</code></td></tr>`);
  }
  const verdict = $('exact-verdict');
  if (!gpu) {
    verdict.textContent = 'CPU-wasm only';
  } else {
    verdict.textContent = allSame ? 'identical on both lanes' : 'the lanes differ';
    verdict.className = `big ${allSame ? 'ok' : 'bad'}`;
  }
  $('exact-detail').innerHTML = 'FNV-1a of each result\'s bits; the native CPU lane gives the same.' +
    `<table class="hashes"><tr><th>m×k×n</th><th>CPU-wasm</th><th>WebGPU</th></tr>${rows.join('')}</table>`;
}

async function run() {
  setStatus('opening WebGPU…');
  const gpu = await openGpu();
  if (gpu) {
    const i = gpu.adapterInfo;
    state.adapter = i;
    const name = [i.vendor, i.architecture].filter(Boolean).join(' · ') || 'unnamed adapter';
    $('gpu-name').textContent = name;
    const detail = [];
    if (i.description) detail.push(esc(i.description));
    if (i.device) detail.push(`device ${esc(i.device)}`);
    if (i.isFallbackAdapter || /swiftshader/i.test(`${i.architecture} ${i.description}`)) {
      detail.push('a software fallback adapter: WebGPU runs on the CPU here, so CPU-wasm should win at every size');
    }
    $('gpu-detail').innerHTML = detail.join(' — ') || 'the browser gives no further description';
  } else {
    state.noGpuReason = noGpuReason;
    $('gpu-name').textContent = 'none';
    $('gpu-detail').textContent = noGpuReason;
    const note = $('notice');
    note.hidden = false;
    note.innerHTML = `<strong>No WebGPU in this tab: ${esc(noGpuReason)}.</strong>` +
      'CPU-wasm is then correctly the only backend: weft\'s router has a single lane to choose from and ' +
      'sends every size there. Open the page in a browser with WebGPU (a recent Chrome or Edge; Firefox ' +
      'or Safari with WebGPU enabled) to compare the two.';
  }

  setStatus('loading weft.wasm…');
  const wasm = await loadWasm();
  state.wasm = { isa: wasm.isa };
  $('wasm-name').textContent = `weft CPU lane, ${wasm.isa} kernel`;
  $('wasm-detail').innerHTML = 'gemm.c\'s packed path with the portable 2×16 microkernel, WebAssembly SIMD ' +
    '(no fused multiply-add), one thread';
  wasm.routerReset(Boolean(gpu));
  redraw();

  // V8 first runs wasm from a quick baseline compile and recompiles hot functions optimised a little later:
  // run the kernels for a moment so that the first sizes are not timed on the baseline code.
  setStatus('warming up weft.wasm…');
  {
    const n = 48;
    const a = genMatrix(1, n * n);
    const b = genMatrix(2, n * n);
    const out = new Float32Array(n * n);
    const t0 = performance.now();
    while (performance.now() - t0 < 400) {
      for (let i = 0; i < 20; i++) wasm.matmul(a, b, n, n, n, out);
      wasm.route(n);
    }
  }

  setStatus('checking that both lanes give the same bits…');
  await checkBits(gpu, wasm);

  // Pass 1: each lane's curve, plotted as it comes; the router learns each size as soon as both lanes have it.
  const ops = new Map();
  const last = { wasm: null, gpu: null }; // each lane's largest point so far: { n, ms }
  const overBudget = (key, n) => last[key] && (last[key].ms / 1000) * (n / last[key].n) ** 3 > MAX_SECONDS;
  for (const p of state.points) {
    const n = p.n;
    const a = genMatrix(1, n * n);
    const b = genMatrix(2, n * n);
    const out = new Float32Array(n * n);
    const lane = {
      wasm: () => wasm.matmul(a, b, n, n, n, out),
      gpu: gpu ? () => matmulExact(gpu, a, b, n, n, n) : null,
    };
    const iters = {};
    if (overBudget('wasm', n)) {
      p.skipped.push('wasm');
    } else {
      setStatus(`n = ${n}: CPU-wasm…`);
      iters.wasm = await batchSize(lane.wasm);
      p.wasm_ms = await timeBatches(lane.wasm, iters.wasm, REPEATS);
      wasm.routerPoint(LANE_CPU, n, p.wasm_ms / 1000);
      last.wasm = { n, ms: p.wasm_ms };
      redraw();
    }
    if (gpu && overBudget('gpu', n)) {
      p.skipped.push('gpu');
    } else if (gpu) {
      setStatus(`n = ${n}: WebGPU…`);
      iters.gpu = await batchSize(lane.gpu);
      p.gpu_ms = await timeBatches(lane.gpu, iters.gpu, REPEATS);
      wasm.routerPoint(LANE_GPU, n, p.gpu_ms / 1000);
      last.gpu = { n, ms: p.gpu_ms };
    }
    if (p.wasm_ms == null && p.gpu_ms == null) continue; // both lanes over the budget: no point here
    const pick = wasm.route(n);
    if (pick < 0) throw new Error(`weft's router found no lane for n = ${n}`);
    p.routed_lane = LANE_KEY[pick];
    p.predicted_ms = { wasm: wasm.predicted(LANE_CPU) * 1000, gpu: gpu ? wasm.predicted(LANE_GPU) * 1000 : null };
    ops.set(n, { lane, iters });
    redraw();
    await nextFrame();
  }

  // The crossover: the first size whose pick differs from the size before.
  for (let i = 1; i < state.points.length; i++) {
    const [p, q] = [state.points[i - 1], state.points[i]];
    if (p.routed_lane !== q.routed_lane) {
      state.crossover = { from_n: p.n, to_n: q.n, from: p.routed_lane, to: q.routed_lane };
      break;
    }
  }

  // Pass 2: routed runs (the router's decision in weft.wasm, then the op on the lane it picked), timed in
  // turn with both lanes' own runs so that drift in the machine's speed touches all three alike.
  for (const p of state.points) {
    if (!ops.has(p.n)) continue;
    const { lane, iters } = ops.get(p.n);
    const n = p.n;
    // a pick whose lane was over the budget here is not timed (it would cost what the budget spared)
    if (p.skipped.includes(p.routed_lane)) continue;
    const routed = () => (wasm.route(n) === LANE_GPU ? lane.gpu() : lane.wasm());
    const routedIters = iters[p.routed_lane];
    const samples = { gpu: [], wasm: [], routed: [] };
    // Each round: the lane not picked first, then the routed run and the picked lane back to back, in
    // alternating order. The two runs compared are neighbours, and each follows the other equally often
    // (a software GPU's threads, still winding down after a GPU run, would tax whichever came next).
    const other = p.routed_lane === 'gpu' ? 'wasm' : 'gpu';
    const timeOther = gpu && !p.skipped.includes(other);
    setStatus(`n = ${n}: routed runs against both lanes…`);
    // An even number of rounds: each order equally often, so the median of the pairs favours neither.
    const rounds = REPEATS + (REPEATS % 2 ? 3 : 2);
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 ? [p.routed_lane, 'routed'] : ['routed', p.routed_lane];
      if (timeOther) order.unshift(other);
      for (const which of order) {
        const op = which === 'routed' ? routed : lane[which];
        await settle();
        samples[which].push(await timeOnce(op, which === 'routed' ? routedIters : iters[which]));
      }
    }
    p.routed_ms = median(samples.routed);
    p.wasm_ms_pass2 = samples.wasm.length ? median(samples.wasm) : null;
    p.gpu_ms_pass2 = samples.gpu.length ? median(samples.gpu) : null;
    p.faster_ms = Math.min(...[p.wasm_ms_pass2, p.gpu_ms_pass2].filter((v) => v != null));
    // routed / faster: the median of each round's routed / picked-lane pair (neighbours in time, so the
    // machine's other load mostly cancels), times how much slower the picked lane was than the other one,
    // if it was (a wrong pick costs exactly that).
    const picked = samples[p.routed_lane];
    const pairs = samples.routed.map((t, r) => t / picked[r]);
    const pickedMs = median(picked);
    p.ratio = median(pairs) * Math.max(1, pickedMs / p.faster_ms);
    redraw();
    await nextFrame();
  }

  const timed = state.points.filter((p) => p.ratio != null);
  state.ratio_max = timed.length ? Math.max(...timed.map((p) => p.ratio)) : null;
  const skipped = state.points.filter((p) => p.skipped.length)
    .map((p) => `n = ${p.n} (${p.skipped.map((k) => LANE_LABEL[k]).join(', ')})`);
  const skipNote = skipped.length
    ? ` Over the ${MAX_SECONDS} s budget per op (?max_seconds=), not measured: ${skipped.join('; ')}.` : '';
  const routedPick = state.points.find((p) => p.routed_lane)?.routed_lane;
  const cross = state.crossover
    ? `the router moves from ${LANE_LABEL[state.crossover.from]} to ${LANE_LABEL[state.crossover.to]} between n = ${state.crossover.from_n} and ${state.crossover.to_n}`
    : `no crossover up to n = ${Math.max(...SIZES)}: ${routedPick ? LANE_LABEL[routedPick] : 'no lane'} is picked at every size`;
  if (!gpu) {
    // One lane: nothing to choose between, so no target; the ratio is the routing step's own cost and noise.
    state.ratio_target = false;
    $('summary').innerHTML = 'One lane here (CPU-wasm): the router has nothing to choose, and sends every size ' +
      `there. Routed ÷ CPU-wasm is at most ${state.ratio_max != null ? state.ratio_max.toFixed(3) : '–'}× ` +
      `(the routing step's own cost and the machine's noise; no target with one lane).${skipNote}`;
  } else {
    state.ratio_target = true;
    const within = state.ratio_max != null && state.ratio_max <= 1.1;
    $('summary').innerHTML = `Routed time is at most <strong class="${within ? 'ok' : 'bad'}">` +
      `${state.ratio_max != null ? state.ratio_max.toFixed(3) : '–'}×</strong> the faster lane's (target ≤ 1.10×); ` +
      `${cross}.${skipNote}`;
  }
  state.clock = crossOriginIsolated ? 'fine (cross-origin isolated)' : 'coarse (0.1 ms steps: not cross-origin isolated)';
  setStatus(`done: ${state.points.length} sizes, median of ${REPEATS} timed batches per point; page clock ${state.clock}`);
  state.done = true;
}

run().catch((e) => {
  state.error = String(e && e.stack ? e.stack : e);
  state.done = true;
  setStatus('failed');
  const note = $('notice');
  note.hidden = false;
  note.innerHTML = `<strong>The benchmark stopped: ${esc(e && e.message ? e.message : e)}</strong>`;
  console.error(e);
});
