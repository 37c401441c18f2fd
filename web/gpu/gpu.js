// gpu.js - WebGPU for weft's browser side: open the tab's GPU, and run a matmul under the exact contract
// (matmul_exact.wgsl, fetched next to this module). Used by the Bench page and by the browser worker.
//
//   const gpu = await openGpu();          // {adapterInfo, device, adapter, limits} or null
//   if (!gpu) console.log(noGpuReason);   // why there is none, in words a person can act on
//   const c = await matmulExact(gpu, a, b, m, k, n);   // Float32Array m*n, row-major
//
// Calls on one device run one after another (a queue per device), so callers may overlap them freely.
//
// Where WebGPU cannot be exact: WGSL lets an implementation flush subnormals to zero (SwiftShader does) and
// assume that no infinity or NaN occurs. matmulExact therefore looks at its operands first (one pass over
// them, small beside the matmul) and runs the GPU kernel only when no product or partial sum can leave the
// normal range; otherwise it computes the canonical loop in JavaScript, so the result bits are the contract's
// either way (see gpuCanBeExact).

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
function gpuCanBeExact(a, b, m, k, n) {
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

// C = A . B under the exact contract: a is m x k, b is k x n, both row-major Float32Arrays; resolves to a
// new Float32Array of m x n, bit-identical to weft's CPU lane and reference (on the GPU, or in JavaScript
// for operands the GPU cannot be exact on: see the top of this file).
export async function matmulExact(gpu, a, b, m, k, n) {
  if (!gpu || !gpu.device) throw new TypeError('matmulExact: no GPU (openGpu() returned null: ' + (noGpuReason || 'not opened') + ')');
  checkShape(a, b, m, k, n);
  if (!gpuCanBeExact(a, b, m, k, n)) return matmulCanonical(a, b, m, k, n);
  const st = await stateFor(gpu.device);
  const run = async () => {
    await st.ready;
    return runMatmul(gpu, st, a, b, m, k, n);
  };
  const result = st.chain.then(run, run);
  st.chain = result.catch(() => {});
  return result;
}
