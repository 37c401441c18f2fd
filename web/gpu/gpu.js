// gpu.js - WebGPU for weft's browser side: open the tab's GPU, and run ops on it under the exact contract:
// matmul (matmul_exact.wgsl) and the transformer ops that matter at scale - gelu, layernorm and the causal
// softmax, each with its backward (gelu_exact.wgsl, layernorm_exact.wgsl, softmax_exact.wgsl, each put
// behind wmath.wgsl), all fetched next to this module. Used by the Bench page and by the browser worker.
//
//   const gpu = await openGpu();          // {adapterInfo, device, adapter, limits} or null
//   if (!gpu) console.log(noGpuReason);   // why there is none, in words a person can act on
//   const c = await matmulExact(gpu, a, b, m, k, n);   // Float32Array m*n, row-major (GPU, or JavaScript)
//   const c2 = await matmulGpu(gpu, a, b, m, k, n);    // the same on the GPU, or null: not exact there
//   const ready = await prepareTx(gpu);   // {ops: the transformer ops whose kernels compiled, why: {op: text}}
//   const r = await txGpu(gpu, 'gelu', {x, n});        // {y} (Uint32Array bits), or null: not exact there
//
// Calls on one device run one after another (a queue per device), so callers may overlap them freely.
//
// Where WebGPU cannot be exact: WGSL lets an implementation flush subnormals to zero (SwiftShader does) and
// assume that no infinity or NaN occurs. matmulGpu therefore looks at its operands first (one pass over
// them, small beside the matmul) and runs the GPU kernel only when no product or partial sum can leave the
// normal range (see gpuCanBeExact); matmulExact then computes the canonical loop in JavaScript instead, so
// the result bits are the contract's either way. The transformer kernels check every value they read and
// make as they go (wmath.wgsl) and raise a status word where one leaves that ground: txGpu then answers
// null, and the caller computes the op on the CPU.

export let noGpuReason = '';

const SHADER_URL = new URL('./matmul_exact.wgsl', import.meta.url);
const TILE_M = 32; // must match TM/TN in the shader
const TILE_N = 32;

let shaderText = null; // Promise<string>, fetched once per page or worker

function fail(reason) {
  noGpuReason = reason;
  return null;
}

// The adapter's description, from adapter.info (current browsers) or requestAdapterInfo() (older ones).
async function describeAdapter(adapter) {
  let info = adapter.info;
  if (!info && typeof adapter.requestAdapterInfo === 'function') {
    try {
      info = await adapter.requestAdapterInfo();
    } catch (e) {
      info = null;
    }
  }
  const pick = (key) => (info && typeof info[key] === 'string' ? info[key] : '');
  const fallback = Boolean((info && info.isFallbackAdapter) || adapter.isFallbackAdapter);
  return {
    vendor: pick('vendor'),
    architecture: pick('architecture'),
    device: pick('device'),
    description: pick('description'),
    isFallbackAdapter: fallback,
  };
}

// Opens the tab's GPU. Resolves to {adapterInfo, device, adapter, limits}, or to null with noGpuReason set.
export async function openGpu() {
  noGpuReason = '';
  const nav = typeof navigator !== 'undefined' ? navigator : null;
  if (!nav || !nav.gpu) {
    return fail(
      typeof isSecureContext !== 'undefined' && !isSecureContext
        ? 'WebGPU needs a secure context: open the page over https or from localhost'
        : 'this browser has no WebGPU (navigator.gpu is missing)'
    );
  }
  let adapter = null;
  try {
    adapter = await nav.gpu.requestAdapter({ powerPreference: 'high-performance' });
  } catch (e) {
    return fail(`requestAdapter failed: ${e && e.message ? e.message : e}`);
  }
  if (!adapter) return fail('WebGPU is present but found no adapter (no usable GPU, or WebGPU is disabled here)');
  const adapterInfo = await describeAdapter(adapter);
  // Ask for the adapter's own storage limits: the default 128 MiB binding would cap a matmul at ~5800^2.
  const want = {};
  for (const key of ['maxStorageBufferBindingSize', 'maxBufferSize']) {
    if (adapter.limits && adapter.limits[key]) want[key] = adapter.limits[key];
  }
  let device = null;
  try {
    device = await adapter.requestDevice({ requiredLimits: want });
  } catch (e) {
    return fail(`the adapter (${adapterInfo.description || adapterInfo.vendor || 'unnamed'}) refused a device: ${e && e.message ? e.message : e}`);
  }
  return { adapterInfo, device, adapter, limits: device.limits };
}

// ------------------------------------------------------------------------------------------ matmul

const states = new WeakMap(); // device -> per-device state (pipeline, buffers, queue of calls)

async function stateFor(device) {
  let st = states.get(device);
  if (st) return st;
  st = { ready: null, chain: Promise.resolve(), lost: null, buf: null, cap: { a: 0, b: 0, c: 0 } };
  states.set(device, st);
  device.lost.then((info) => {
    st.lost = `the WebGPU device was lost (${info.reason || 'unknown'}): ${info.message || 'no message'}`;
  });
  st.ready = (async () => {
    if (!shaderText) {
      shaderText = fetch(SHADER_URL).then((r) => {
        if (!r.ok) throw new Error(`cannot fetch ${SHADER_URL}: HTTP ${r.status}`);
        return r.text();
      });
    }
    const code = await shaderText;
    device.pushErrorScope('validation');
    const module = device.createShaderModule({ code, label: 'weft matmul_exact' });
    const pipeline = await device.createComputePipelineAsync({
      layout: 'auto',
      compute: { module, entryPoint: 'main' },
      label: 'weft matmul_exact',
    });
    const err = await device.popErrorScope();
    if (err) throw new Error(`matmul_exact.wgsl did not compile: ${err.message}`);
    st.pipeline = pipeline;
    st.uniform = device.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  })();
  return st;
}

// Buffers are kept per device and grown to the next power of two, so a sweep of sizes allocates a few times.
function ensureBuffers(device, st, aBytes, bBytes, cBytes) {
  const grow = (x) => Math.max(256, 2 ** Math.ceil(Math.log2(x)));
  const storage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
  if (!st.buf) st.buf = {};
  if (st.cap.a < aBytes) {
    if (st.buf.a) st.buf.a.destroy();
    st.cap.a = grow(aBytes);
    st.buf.a = device.createBuffer({ size: st.cap.a, usage: storage });
  }
  if (st.cap.b < bBytes) {
    if (st.buf.b) st.buf.b.destroy();
    st.cap.b = grow(bBytes);
    st.buf.b = device.createBuffer({ size: st.cap.b, usage: storage });
  }
  if (st.cap.c < cBytes) {
    if (st.buf.c) st.buf.c.destroy();
    if (st.buf.read) st.buf.read.destroy();
    st.cap.c = grow(cBytes);
    st.buf.c = device.createBuffer({ size: st.cap.c, usage: storage });
    st.buf.read = device.createBuffer({ size: st.cap.c, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    st.bind = null;
  }
  if (!st.bind || st.bind.a !== st.buf.a || st.bind.b !== st.buf.b) {
    st.bind = {
      a: st.buf.a,
      b: st.buf.b,
      group: device.createBindGroup({
        layout: st.pipeline.getBindGroupLayout(0),
        entries: [
          { binding: 0, resource: { buffer: st.buf.a } },
          { binding: 1, resource: { buffer: st.buf.b } },
          { binding: 2, resource: { buffer: st.buf.c } },
          { binding: 3, resource: { buffer: st.uniform } },
        ],
      }),
    };
  }
}

async function runMatmul(gpu, st, a, b, m, k, n) {
  const device = gpu.device;
  if (st.lost) throw new Error(st.lost);
  const out = new Float32Array(m * n);
  if (m === 0 || n === 0) return out;
  const aBytes = Math.max(4, m * k * 4);
  const bBytes = Math.max(4, k * n * 4);
  const cBytes = m * n * 4;
  const lim = device.limits.maxStorageBufferBindingSize;
  if (Math.max(aBytes, bBytes, cBytes) > lim) {
    throw new RangeError(`matmul ${m}x${k}x${n}: an operand needs ${Math.max(aBytes, bBytes, cBytes)} bytes, ` +
      `more than this GPU binds (${lim})`);
  }
  ensureBuffers(device, st, aBytes, bBytes, cBytes);
  if (m * k > 0) device.queue.writeBuffer(st.buf.a, 0, a.buffer, a.byteOffset, m * k * 4);
  if (k * n > 0) device.queue.writeBuffer(st.buf.b, 0, b.buffer, b.byteOffset, k * n * 4);
  device.queue.writeBuffer(st.uniform, 0, new Uint32Array([m, n, k, 0]));
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  pass.setPipeline(st.pipeline);
  pass.setBindGroup(0, st.bind.group);
  pass.dispatchWorkgroups(Math.ceil(n / TILE_N), Math.ceil(m / TILE_M), 1);
  pass.end();
  enc.copyBufferToBuffer(st.buf.c, 0, st.buf.read, 0, cBytes);
  device.queue.submit([enc.finish()]);
  await st.buf.read.mapAsync(GPUMapMode.READ, 0, cBytes);
  out.set(new Float32Array(st.buf.read.getMappedRange(0, cBytes)));
  st.buf.read.unmap();
  return out;
}

// 1 when the GPU kernel gives the contract's bits for these operands: every input finite and zero or
// normal, every nonzero product at least 2^-102 in magnitude, and k times the largest product below 2^126.
// Then no product is subnormal or infinite, and every partial sum is zero or normal and finite: the partial
// sums are sums of multiples of 2^-125 (a float of magnitude >= 2^-102 is one), so a nonzero one is at
// least 2^-125, and a multiple of 2^-125 below 2^-102 is a float itself; so flushing subnormals to zero and
// assuming finite values change nothing.
export function gpuCanBeExact(a, b, m, k, n) {
  const range = (v, count) => {
    let lo = Infinity;
    let hi = 0;
    for (let i = 0; i < count; i++) {
      const x = Math.abs(v[i]);
      if (x === 0) continue;
      if (!(x >= 2 ** -126 && x <= 3.4028234663852886e38)) return null; // subnormal, infinite or NaN
      if (x < lo) lo = x;
      if (x > hi) hi = x;
    }
    return [lo, hi];
  };
  if (m * k === 0 || k * n === 0) return true;
  const ra = range(a, m * k);
  const rb = ra && range(b, k * n);
  if (!ra || !rb) return false;
  if (ra[1] === 0 || rb[1] === 0) return true; // an all-zero operand: every sum is +0
  return ra[0] * rb[0] >= 2 ** -102 && k * ra[1] * rb[1] < 2 ** 126;
}

// The canonical loop of src/core/reference.c in JavaScript: a product of two floats is exact in a double,
// and a double sum of two floats rounded to float is the float sum (53 >= 2 * 24 + 2 bits), so each
// Math.fround is the one rounding the contract asks for, subnormals, infinities and NaNs included. Exported
// for the worker page, which needs it where there is no GPU at all.
export function matmulCanonical(a, b, m, k, n) {
  const c = new Float32Array(m * n);
  const row = new Float32Array(n);
  for (let i = 0; i < m; i++) {
    row.fill(0);
    for (let q = 0; q < k; q++) {
      const av = a[i * k + q];
      const boff = q * n;
      for (let j = 0; j < n; j++) row[j] = Math.fround(row[j] + Math.fround(av * b[boff + j]));
    }
    c.set(row, i * n);
  }
  return c;
}

function checkShape(a, b, m, k, n) {
  for (const [name, v] of [['m', m], ['k', k], ['n', n]]) {
    if (!Number.isInteger(v) || v < 0) throw new RangeError(`matmulExact: ${name} must be a whole number >= 0, got ${v}`);
  }
  if (!(a instanceof Float32Array) || !(b instanceof Float32Array)) {
    throw new TypeError('matmulExact: a and b must be Float32Arrays (row-major)');
  }
  if (a.length < m * k) throw new RangeError(`matmulExact: a has ${a.length} floats, an ${m}x${k} matrix needs ${m * k}`);
  if (b.length < k * n) throw new RangeError(`matmulExact: b has ${b.length} floats, a ${k}x${n} matrix needs ${k * n}`);
}

// C = A . B under the exact contract on the GPU: a is m x k, b is k x n, both row-major Float32Arrays;
// resolves to a new Float32Array of m x n, bit-identical to weft's CPU lane and reference, or to null when
// these operands are ones the GPU cannot be exact on (see the top of this file). Throws a RangeError when an
// operand is larger than the GPU binds.
export async function matmulGpu(gpu, a, b, m, k, n) {
  if (!gpu || !gpu.device) throw new TypeError('matmulGpu: no GPU (openGpu() returned null: ' + (noGpuReason || 'not opened') + ')');
  checkShape(a, b, m, k, n);
  if (!gpuCanBeExact(a, b, m, k, n)) return null;
  const st = await stateFor(gpu.device);
  return queued(st, async () => {
    await st.ready;
    return runMatmul(gpu, st, a, b, m, k, n);
  });
}

// The same, always answered: on the GPU, or in JavaScript for operands the GPU cannot be exact on.
export async function matmulExact(gpu, a, b, m, k, n) {
  const c = await matmulGpu(gpu, a, b, m, k, n);
  return c || matmulCanonical(a, b, m, k, n);
}

// Runs fn after every call queued on this device before it.
function queued(st, fn) {
  const result = st.chain.then(fn, fn);
  st.chain = result.catch(() => {});
  return result;
}

// ------------------------------------------------------------------------------------ transformer ops

// Each module: its file (behind wmath.wgsl), the access of its storage bindings 2, 3, ... (binding 0 is the
// uniform `prm`, 1 the status word), and its entry points. One explicit layout per module serves them all.
const TX_MODULES = {
  gelu: { file: 'gelu_exact.wgsl', storage: ['read', 'read', 'rw'], entries: ['gelu_fwd', 'gelu_bwd'] },
  layernorm: {
    file: 'layernorm_exact.wgsl',
    storage: ['read', 'read', 'read', 'read', 'rw', 'rw', 'rw'],
    entries: ['ln_stats', 'ln_norm', 'ln_bwd_ab', 'ln_bwd_dx', 'ln_bwd_dgb'],
  },
  softmax: { file: 'softmax_exact.wgsl', storage: ['read', 'read', 'rw', 'rw'], entries: ['sm_rows', 'sm_probs', 'sm_bwd_dot', 'sm_bwd'] },
};
// The ops these kernels run, and the module of each.
export const TX_GPU_OPS = { gelu: 'gelu', gelu_backward: 'gelu', layernorm: 'layernorm', layernorm_backward: 'layernorm',
  causal_softmax: 'softmax', causal_softmax_backward: 'softmax' };
const WG = 64; // the kernels' workgroup size

const texts = new Map(); // URL -> Promise<string>, fetched once per page or worker
function fetchText(name) {
  const url = new URL(`./${name}`, import.meta.url).href;
  if (!texts.has(url)) {
    texts.set(url, fetch(url).then((r) => {
      if (!r.ok) throw new Error(`cannot fetch ${url}: HTTP ${r.status}`);
      return r.text();
    }));
  }
  return texts.get(url);
}

// One module's shader, its explicit layout and a pipeline per entry point; throws with the compiler's words
// (a line number of the kernel's file; 0 or less: of wmath.wgsl, which is `skip` lines in front of it).
async function compileModule(device, name, m, code, skip) {
  const module = device.createShaderModule({ code, label: `weft ${m.file}` });
  const info = module.getCompilationInfo ? await module.getCompilationInfo() : { messages: [] };
  const errors = info.messages.filter((x) => x.type === 'error');
  if (errors.length) {
    const e = errors[0];
    throw new Error(`${m.file} did not compile: line ${e.lineNum - skip}:${e.linePos}: ${e.message}`);
  }
  const entries = [{ binding: 0, visibility: GPUShaderStage.COMPUTE, buffer: { type: 'uniform' } },
    { binding: 1, visibility: GPUShaderStage.COMPUTE, buffer: { type: 'storage' } }];
  m.storage.forEach((access, k) => entries.push({ binding: 2 + k, visibility: GPUShaderStage.COMPUTE,
    buffer: { type: access === 'rw' ? 'storage' : 'read-only-storage' } }));
  const layout = device.createBindGroupLayout({ entries, label: `weft ${name}` });
  const pipelineLayout = device.createPipelineLayout({ bindGroupLayouts: [layout] });
  const pipelines = {};
  for (const entryPoint of m.entries) {
    pipelines[entryPoint] = await device.createComputePipelineAsync({
      layout: pipelineLayout, compute: { module, entryPoint }, label: `weft ${entryPoint}` });
  }
  return { layout, pipelines };
}

// Compiles the transformer kernels on this GPU (once per device). Resolves to {ops, why}: the names of the
// ops whose kernels compiled, and for each other op of TX_GPU_OPS the reason in words.
export async function prepareTx(gpu) {
  const device = gpu.device;
  const st = await stateFor(device);
  if (!st.tx) {
    st.tx = (async () => {
      const modules = {};
      const why = {};
      const wmath = await fetchText('wmath.wgsl').catch((e) => e);
      for (const [name, m] of Object.entries(TX_MODULES)) {
        try {
          if (wmath instanceof Error) throw wmath;
          const code = `${wmath}\n${await fetchText(m.file)}`;
          device.pushErrorScope('validation');
          let made = null;
          let failed = null;
          try {
            made = await compileModule(device, name, m, code, wmath.split('\n').length);
          } catch (e) {
            failed = e;
          }
          const err = await device.popErrorScope();
          if (failed) throw failed;
          if (err) throw new Error(`${m.file}: ${err.message}`);
          const { layout, pipelines } = made;
          modules[name] = { m, layout, pipelines };
        } catch (e) {
          why[name] = e && e.message ? e.message : String(e);
        }
      }
      return { modules, why };
    })();
  }
  const { modules, why } = await st.tx;
  const ready = { ops: [], why: {} };
  for (const [op, mod] of Object.entries(TX_GPU_OPS)) {
    if (modules[mod]) ready.ops.push(op);
    else ready.why[op] = why[mod];
  }
  return ready;
}

// Runs `passes` ([{entry, count}]: count invocations each, in order) of a module over its storage bindings
// `bufs` (per binding 2, 3, ...: null, or {data: Uint32Array to upload} and/or {n: cells, read: true}) with
// the uniform `params` (u32 fields, keep first). Resolves to the read buffers' cells (Uint32Arrays, in the
// order of bufs), or null when a kernel raised its status (a value it cannot be exact on).
async function runTx(gpu, st, modName, params, bufs, passes) {
  const device = gpu.device;
  if (st.lost) throw new Error(st.lost);
  const { modules } = await st.tx;
  const mod = modules[modName];
  if (!mod) throw new Error(`the ${modName} kernels are not compiled on this GPU`);
  const lim = Math.min(device.limits.maxStorageBufferBindingSize, device.limits.maxBufferSize);
  const sizes = bufs.map((b) => (b ? Math.max(4, 4 * Math.max(b.n || 0, b.data ? b.data.length : 0)) : 4));
  const big = Math.max(...sizes);
  if (big > lim) throw new RangeError(`${modName}: an operand needs ${big} bytes, more than this GPU binds (${lim})`);
  const made = [];
  const make = (size, usage) => {
    const b = device.createBuffer({ size, usage });
    made.push(b);
    return b;
  };
  try {
    const storage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
    const uniform = make(Math.ceil(params.length / 4) * 16, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
    device.queue.writeBuffer(uniform, 0, params);
    const status = make(4, storage);
    const gbufs = bufs.map((b, k) => {
      const g = make(sizes[k], storage);
      if (b && b.data && b.data.length) device.queue.writeBuffer(g, 0, b.data.buffer, b.data.byteOffset, b.data.length * 4);
      return g;
    });
    const group = device.createBindGroup({
      layout: mod.layout,
      entries: [{ binding: 0, resource: { buffer: uniform } }, { binding: 1, resource: { buffer: status } },
        ...gbufs.map((g, k) => ({ binding: 2 + k, resource: { buffer: g } }))],
    });
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setBindGroup(0, group);
    for (const { entry, count } of passes) {
      const groups = Math.ceil(count / WG);
      if (!groups) continue;
      pass.setPipeline(mod.pipelines[entry]);
      pass.dispatchWorkgroups(Math.min(groups, 65535), Math.ceil(groups / 65535), 1);
    }
    pass.end();
    // The status word and every buffer read back, one after another in one mappable buffer.
    const reads = [];
    let at = 4;
    bufs.forEach((b, k) => {
      if (b && b.read) {
        reads.push({ k, at, n: b.n });
        at += 4 * b.n;
      }
    });
    const back = make(Math.max(4, at), GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
    enc.copyBufferToBuffer(status, 0, back, 0, 4);
    for (const r of reads) if (r.n) enc.copyBufferToBuffer(gbufs[r.k], 0, back, r.at, 4 * r.n);
    device.queue.submit([enc.finish()]);
    await back.mapAsync(GPUMapMode.READ, 0, Math.max(4, at));
    const cells = new Uint32Array(back.getMappedRange(0, Math.max(4, at)));
    const out = cells[0] ? null : reads.map((r) => cells.slice(r.at / 4, r.at / 4 + r.n));
    back.unmap();
    return out;
  } finally {
    for (const b of made) b.destroy();
  }
}

const f32bits = (x) => new Uint32Array(new Float32Array([x]).buffer)[0];
const cat = (a, an, b, bn) => {
  const out = new Uint32Array(an + bn);
  out.set(a.subarray(0, an));
  if (b) out.set(b.subarray(0, bn), an);
  return out;
};

// One transformer op on the GPU under the exact contract, operands as Uint32Arrays of f32 bits:
//   gelu {x, n} -> {y};  gelu_backward {x, dy, n} -> {dx}
//   layernorm {x, gamma, beta, N, C, eps (bits)} -> {y, mean, rstd}
//   layernorm_backward {dy, x, mean, rstd, gamma, dgamma, dbeta (null or the values to accumulate into), N, C}
//     -> {dx, dgamma, dbeta}
//   causal_softmax {scores, R, T, scale (bits)} -> {probs};  causal_softmax_backward {probs, dprobs, R, T,
//     scale} -> {dscores}
// Resolves to the outputs (bit-identical to src/core/reference_tx.c), or to null when a value is one this GPU
// cannot be exact on (the caller then computes the op on the CPU). Throws a RangeError when an operand is
// larger than the GPU binds, and an Error when the GPU failed.
export async function txGpu(gpu, op, a) {
  if (!gpu || !gpu.device) throw new TypeError('txGpu: no GPU');
  const mod = TX_GPU_OPS[op];
  if (!mod) throw new TypeError(`txGpu: ${op} has no GPU kernel`);
  const st = await stateFor(gpu.device);
  if (!st.tx) await prepareTx(gpu);
  return queued(st, async () => {
    switch (op) {
      case 'gelu':
      case 'gelu_backward': {
        const fwd = op === 'gelu';
        const r = await runTx(gpu, st, mod, new Uint32Array([0, a.n]),
          [{ data: a.x.subarray(0, a.n) }, fwd ? null : { data: a.dy.subarray(0, a.n) }, { n: a.n, read: true }],
          [{ entry: fwd ? 'gelu_fwd' : 'gelu_bwd', count: a.n }]);
        return r && (fwd ? { y: r[0] } : { dx: r[0] });
      }
      case 'layernorm': {
        const { N, C } = a;
        const r = await runTx(gpu, st, mod, new Uint32Array([0, N, C, f32bits(C), a.eps, 0]),
          [{ data: a.x.subarray(0, N * C) }, { data: cat(a.gamma, C, a.beta, C) }, null, null, { n: 2 * N, read: true },
            { n: N * C, read: true }, null],
          [{ entry: 'ln_stats', count: N }, { entry: 'ln_norm', count: N * C }]);
        if (!r) return null;
        const mean = new Uint32Array(N);
        const rstd = new Uint32Array(N);
        for (let i = 0; i < N; i++) (mean[i] = r[0][2 * i]), (rstd[i] = r[0][2 * i + 1]);
        return { y: r[1], mean, rstd };
      }
      case 'layernorm_backward': {
        const { N, C } = a;
        const flags = (a.dgamma ? 1 : 0) | (a.dbeta ? 2 : 0);
        const dgb = new Uint32Array(2 * C);
        if (a.dgamma) dgb.set(a.dgamma.subarray(0, C));
        if (a.dbeta) dgb.set(a.dbeta.subarray(0, C), C);
        const passes = [{ entry: 'ln_bwd_ab', count: N }, { entry: 'ln_bwd_dx', count: N * C }];
        if (flags) passes.push({ entry: 'ln_bwd_dgb', count: C });
        const r = await runTx(gpu, st, mod, new Uint32Array([0, N, C, f32bits(C), 0, flags]),
          [{ data: a.x.subarray(0, N * C) }, { data: a.gamma.subarray(0, C) }, { data: a.dy.subarray(0, N * C) },
            { data: cat(a.mean, N, a.rstd, N) }, { n: 2 * N }, { n: N * C, read: true }, { data: dgb, n: 2 * C, read: !!flags }],
          passes);
        if (!r) return null;
        return { dx: r[0], dgamma: a.dgamma ? r[1].slice(0, C) : null, dbeta: a.dbeta ? r[1].slice(C) : null };
      }
      case 'causal_softmax':
      case 'causal_softmax_backward': {
        const { R, T } = a;
        const rows = R * T;
        const fwd = op === 'causal_softmax';
        const r = await runTx(gpu, st, mod, new Uint32Array([0, rows, T, a.scale]),
          [{ data: (fwd ? a.scores : a.probs).subarray(0, rows * T) }, fwd ? null : { data: a.dprobs.subarray(0, rows * T) },
            { n: fwd ? 2 * rows : rows }, { n: rows * T, read: true }],
          fwd ? [{ entry: 'sm_rows', count: rows }, { entry: 'sm_probs', count: rows * T }]
            : [{ entry: 'sm_bwd_dot', count: rows }, { entry: 'sm_bwd', count: rows * T }]);
        return r && (fwd ? { probs: r[0] } : { dscores: r[0] });
      }
      default:
        return null;
    }
  });
}
