// worker.js - makes this tab a lane of a weft fabric: it connects to the fabric's WebSocket, answers the
// wire protocol (version 2) of docs/PROTOCOL.md as the worker (one frame per binary message), and runs the
// ops it offers under the exact contract, with the bits of weft's CPU lane. It lists two lanes:
//   0 "cpu": every op it offers on the CPU - the version-1 ops in JavaScript, each multiply and add rounded
//     to fp32 on its own (Math.fround) in the canonical order of src/core/reference.c (matmul through
//     weft.wasm's gemm when loaded), and the transformer ops (8..24) through weft.wasm, the C reference
//     compiled to WebAssembly;
//   1 "webgpu" (when the tab has WebGPU): the ops it has exact WGSL kernels for (../gpu/gpu.js: matmul,
//     gelu, layernorm, the causal softmax and their backwards) whose kernels compiled here.
// An OP names lane 0 or 1, or -1: then this tab picks, its GPU for a GPU op of at least GPU_MIN elements of
// work (gpu_min in the page's address) and the CPU otherwise. A GPU kernel that meets a value it cannot be
// exact on (a subnormal, an infinity: gpu.js says which) hands the op back, and the CPU computes it. The
// reply names the lane that computed the result; the page counts both per op. Requests are validated as
// `weft worker` does: exact payload sizes, shapes and counts against the caps, handles of this connection.
//
// It runs in a dedicated Worker started by page.js (so a long JavaScript op never freezes the page), or on
// the page itself through startWorker() where module workers are missing. Started in a Worker, it waits for the page's message
// {url, secret, gpuMin}; later {secret} messages replace the secret for the next connection; it posts its
// status.

import { openGpu, matmulGpu, matmulCanonical, gpuCanBeExact, prepareTx, txGpu, TX_GPU_OPS, noGpuReason } from '../gpu/gpu.js';

const MAGIC = 0x54464557;
const VERSION = 2;
const REPLY = 0x8000;
const T = { HELLO: 1, AUTH: 2, LANES: 3, CREATE: 4, WRITE: 5, READ: 6, FREE: 7, OP: 8, PROVE: 9, RETYPE: 12 };
const S = { OK: 0, INVALID_ARGUMENT: 1, SHAPE: 2, OVERFLOW: 3, OUT_OF_MEMORY: 5, UNSUPPORTED: 6, LANE_FAILED: 7,
  NOT_FOUND: 8, STATE: 9, INTERNAL: 11 };
const MAX_RANK = 4;
const MAX_DIM = 2 ** 28;
const MAX_ELEMENTS = 2 ** 28;
const MAX_FRAME = 16 << 20; // payload bytes this tab accepts in one message
const MAX_RESIDENT = 1024 * 1024 * 1024;
const MAX_HANDLES = 4096;
// OP (protocol 2): a 20-byte head, 44 bytes per operand, 96 bytes of parameters (8 x i64, 8 x f32).
const OP_HEAD = 20;
const OP_ENTRY = 44;
const OP_PARAMS = 96;
const OP_COUNT = 25; // the op table's kinds (include/weft.h): a kind beyond it is on no allow-list
const CONTRACT_EXACT = 0;
const CONTRACT_FP32 = 1;
// The op table's kinds (include/weft.h). This tab offers the version-1 set (0..7) in JavaScript and WebGPU,
// and, once weft.wasm has loaded, the version-2 ops (8..24) through the wasm build of the C reference
// (web/wasm/weft_wasm_ops.c over src/core/reference_tx.c): the LANES entry's mask says which.
const OPS = ['matmul', 'add', 'relu', 'relu_backward', 'scale', 'axpy', 'sum_rows', 'softmax_xent',
  'embedding', 'embedding_backward', 'layernorm', 'layernorm_backward', 'gelu', 'gelu_backward', 'attention',
  'attention_backward', 'causal_softmax', 'causal_softmax_backward', 'crossentropy', 'crossentropy_backward',
  'adamw', 'sumsq', 'permute', 'copy_slice', 'attention_cached'];
const V1_COUNT = 8;
const OPS_V1 = 0xffn;
const OPS_WASM = 0x1ffff00n;
// Each op's inputs and outputs in the table (src/core/optable.c); softmax_xent's outputs are optional.
const SLOTS = { matmul: [2, 1], add: [2, 1], relu: [1, 1], relu_backward: [2, 1], scale: [1, 1], axpy: [1, 1],
  sum_rows: [1, 1], softmax_xent: [2, 2], embedding: [4, 1], embedding_backward: [3, 2], layernorm: [3, 3],
  layernorm_backward: [5, 3], gelu: [1, 1], gelu_backward: [2, 1], attention: [1, 3], attention_backward: [3, 1],
  causal_softmax: [1, 1], causal_softmax_backward: [2, 1], crossentropy: [2, 1], crossentropy_backward: [3, 1],
  adamw: [1, 3], sumsq: [1, 1], permute: [1, 1], copy_slice: [1, 1], attention_cached: [1, 2] };
const DT_F32 = 0;
const DT_I32 = 1;
// The lanes this tab lists: the CPU (every op it offers) and, with WebGPU, its GPU (the ops it has kernels for).
const LANE_CPU = 0;
const LANE_GPU = 1;
// An op the tab routes itself (lane -1) goes to its GPU from this many elements of work (elementwise and
// row ops: the elements; matmul: m n k); the page's address may say otherwise (#gpu_min=N). A fallback
// adapter (a CPU implementation of WebGPU, such as SwiftShader) is never picked unless the address asks:
// measured beside weft.wasm on the same CPU it is 1.3 to 100 times slower (bench/web/bench_tx_web.mjs).
const GPU_MIN_DEFAULT = 1 << 18;
let gpuMin = null; // the page's word, if any
// The ops this tab's GPU runs (their kernels compiled here), and why the others do not.
let gpuOps = new Set();
let gpuWhy = {};

// weft.wasm's exports once loaded (loadWasm): the version-2 ops run there.
let sharedWasm = null;
let wasmWhy = 'weft.wasm is not loaded';

// Loads weft.wasm (from `source`: a URL, or the module's bytes) for every Session made after; returns its
// exports, or null with the reason in wasmWhy (the tab then offers the version-1 ops only).
export async function loadWasm(source) {
  try {
    let bytes = source;
    if (typeof source === 'string' || source instanceof URL) {
      const resp = await fetch(source);
      if (!resp.ok) throw new Error(`${source}: HTTP ${resp.status}`);
      bytes = await resp.arrayBuffer();
    }
    const { instance } = await WebAssembly.instantiate(bytes, {});
    if (typeof instance.exports.weft_wasm_run !== 'function') throw new Error('this weft.wasm has no weft_wasm_run');
    sharedWasm = instance.exports;
  } catch (e) {
    sharedWasm = null;
    wasmWhy = `weft.wasm did not load: ${e && e.message ? e.message : e}`;
  }
  return sharedWasm;
}

const f = Math.fround;
// ran: per op name [on the CPU, on the GPU], what the page shows and the fabric hears in each reply.
const status = { state: 'starting', ops: 0, ran: {}, device: '', cpu: '', server: '', closeReason: '', error: '' };
const count = (name, lane) => {
  status.ops++;
  (status.ran[name] ||= [0, 0])[lane]++;
};
let report = () => {}; // tells the page what status holds now
let currentSecret = () => '';

class Refusal extends Error {
  constructor(st, msg, close = false) {
    super(msg);
    this.status = st;
    this.close = close;
  }
}
const refuse = (st, msg, close) => {
  throw new Refusal(st, msg, close);
};

// ----------------------------------------------------------------------------------- exact math (wmath.c)

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const bitsToFloat = (u) => ((u32[0] = u >>> 0), f32[0]);
const floatToBits = (x) => ((f32[0] = x), u32[0]);
const pow2i = (n) => bitsToFloat((n + 127) << 23);

// Under the exact contract every NaN result is stored as the canonical quiet NaN 0x7fc00000
// (src/core/reference.h). A Float32Array store of a NaN keeps whatever bits the engine's arithmetic made (V8
// keeps an input NaN's payload and sign, and x86 makes 0xffc00000 for inf - inf; ECMAScript leaves the bits to
// the implementation), so the first n elements of each output are rewritten through their bits.
function canonicalNaN(arr, n) {
  let bits = null;
  for (let e = 0; e < n; e++) {
    if (arr[e] === arr[e]) continue;
    if (!bits) bits = new Uint32Array(arr.buffer, arr.byteOffset, arr.length);
    bits[e] = 0x7fc00000;
  }
}

// weft_expf, step for step: every product and sum rounded to fp32 on its own.
function expf(x) {
  if (x !== x) return x;
  if (x > 88.72283935546875) return Infinity;
  if (x < -103.97208404541015625) return 0;
  const n = Math.floor(f(f(x * f(1.44269502925872802734375)) + 0.5));
  let r = f(x - f(n * f(0.693145751953125)));
  r = f(r - f(n * f(1.428606765330187045e-6)));
  let p = f(1.98412698e-4);
  p = f(f(p * r) + f(1.38888889e-3));
  p = f(f(p * r) + f(8.33333377e-3));
  p = f(f(p * r) + f(4.16666679e-2));
  p = f(f(p * r) + f(1.66666672e-1));
  p = f(f(p * r) + 0.5);
  p = f(f(p * r) + 1);
  p = f(f(p * r) + 1);
  const e = n;
  if (e > 127) return f(f(p * pow2i(127)) * pow2i(e - 127));
  if (e < -126) return f(f(p * pow2i(e + 64)) * pow2i(-64));
  return f(p * pow2i(e));
}

const LOG_C = [1.0, -5.0e-1, 3.333333433e-1, -2.500000298e-1, 1.999998242e-1, -1.666648984e-1, 1.428636611e-1,
  -1.250664145e-1, 1.110298857e-1, -9.878969938e-2, 9.05450508e-2, -9.342882037e-2, 9.089755267e-2,
  -4.717759788e-2].map(f);

// weft_logf, step for step.
function logf(x) {
  if (x !== x) return x;
  if (x < 0) return NaN;
  if (x === 0) return -Infinity;
  if (x === Infinity) return x;
  let e = 0;
  if (x < f(1.17549435e-38)) {
    x = f(x * 8388608);
    e = -23;
  }
  const u = floatToBits(x);
  e += ((u >>> 23) & 0xff) - 127;
  let m = bitsToFloat((u & 0x007fffff) | 0x3f800000);
  if (m > f(1.41421353816986083984375)) {
    m = f(m * 0.5);
    e = e + 1;
  }
  const fm = f(m - 1);
  let q = LOG_C[13];
  for (let i = 12; i >= 0; i--) q = f(f(q * fm) + LOG_C[i]);
  const l = f(q * fm);
  const fe = f(e);
  return f(f(fe * f(0.693145751953125)) + f(l + f(fe * f(1.428606765330187045e-6))));
}

// ------------------------------------------------------------------------------------------ the session

export class Session {
  // `server`: the host:port this tab dialled (its WebSocket URL's), which its proof of the secret names.
  constructor(gpu, secret, server = '', wasm = sharedWasm) {
    this.gpu = gpu;
    this.gpuOps = gpu ? gpuOps : new Set();
    this.wasm = wasm;
    this.secret = secret;
    this.server = server;
    this.hello = false;
    this.tensors = new Map(); // handle -> {data: Float32Array (4-byte cells, i32 as bits), dims, numel, dtype}
    this.nextId = 1;
    this.resident = 0;
  }

  // Rank 1..4, dims >= 1 (batch dimensions of rank 3-4: >= 0), each <= 2^28, product <= 2^28.
  static shape(dims) {
    if (dims.length < 1 || dims.length > MAX_RANK) refuse(S.SHAPE, `rank ${dims.length}; a tensor has 1 to ${MAX_RANK} dimensions`);
    let capped = 1;
    let numel = 1;
    dims.forEach((d, i) => {
      const batch = dims.length >= 3 && i < dims.length - 2;
      if (!Number.isSafeInteger(d) || d < 0 || (d === 0 && !batch)) refuse(S.SHAPE, `dimension ${i} is ${d}; dimensions must be >= 1 (only batch dimensions may be 0)`);
      if (d > MAX_DIM) refuse(S.OVERFLOW, `dimension ${i} is ${d}; the cap is ${MAX_DIM}`);
      capped *= d || 1;
      if (capped > MAX_ELEMENTS) refuse(S.OVERFLOW, `the element count passes the cap of ${MAX_ELEMENTS} at dimension ${i}`);
      numel *= d;
    });
    return numel;
  }

  tensor(handle, what) {
    const t = handle === 0n ? undefined : this.tensors.get(handle);
    if (!t) refuse(S.NOT_FOUND, `handle ${handle} in ${what} refers to no tensor of this connection`);
    return t;
  }

  // One request; returns [status, payload bytes (Uint8Array) or message, close?].
  async handle(type, p) {
    const dv = new DataView(p.buffer, p.byteOffset, p.byteLength);
    const want = (n, what) => {
      if (p.byteLength !== n) refuse(S.INVALID_ARGUMENT, `${what} payload is ${p.byteLength} bytes; it must be exactly ${n}`);
    };
    if (!this.hello && type !== T.HELLO) refuse(S.STATE, 'the first frame must be hello', true);
    switch (type) {
      case T.HELLO: {
        want(8, 'hello');
        if (this.hello) refuse(S.STATE, 'hello was already received');
        const version = dv.getUint32(0, true);
        if (version !== VERSION) refuse(S.UNSUPPORTED, `protocol version ${version} is not spoken here (this tab speaks ${VERSION})`, true);
        this.hello = true;
        const out = new Uint8Array(24 + 32);
        const o = new DataView(out.buffer);
        o.setUint32(0, VERSION, true);
        o.setUint32(4, 1, true); // HMAC-SHA256 proofs (PROVE)
        o.setUint32(8, 0, true); // the tab asks nothing of the fabric: the fabric is what the user opened
        crypto.getRandomValues(out.subarray(12, 44));
        o.setUint32(44, MAX_FRAME, true);
        o.setBigUint64(48, BigInt(MAX_RESIDENT), true);
        return out;
      }
      case T.AUTH:
        want(32, 'auth');
        return new Uint8Array(0); // this tab requires no proof from the fabric
      case T.PROVE: {
        want(32, 'prove');
        if (!this.secret) {
          refuse(S.INVALID_ARGUMENT, 'this fabric requires a shared secret: open the worker page as .../worker/#secret=THE_SECRET', true);
        }
        if (!crypto.subtle) refuse(S.UNSUPPORTED, 'no WebCrypto here (the page is not a secure context): serve it over https or from localhost', true);
        // HMAC-SHA256(secret, "weft-v1 tab->fabric" || nonce || the host:port dialled): a label of its own, so
        // it is never a valid login of `weft worker`, and this server's name, so no other server can use it.
        const key = await crypto.subtle.importKey('raw', new TextEncoder().encode(this.secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
        const label = new TextEncoder().encode('weft-v1 tab->fabric');
        const server = new TextEncoder().encode(this.server);
        const msg = new Uint8Array(label.length + 32 + server.length);
        msg.set(label);
        msg.set(p, label.length);
        msg.set(server, label.length + 32);
        return new Uint8Array(await crypto.subtle.sign('HMAC', key, msg));
      }
      case T.LANES: {
        want(0, 'lanes');
        const enc = new TextEncoder();
        // Lane 0, the CPU, with every op the tab offers; lane 1, its GPU, with the ops it has kernels for.
        const lanes = [{ ops: this.offered(), strs: ['cpu', this.wasm ? 'wasm' : 'js', status.cpu || 'JavaScript on the CPU'] }];
        if (this.gpuOps.size) lanes.push({ ops: this.gpuMask(), strs: ['webgpu', 'webgpu', status.device] });
        const parts = lanes.map((l) => ({ ops: l.ops, strs: l.strs.map((x) => enc.encode(x).subarray(0, 255)) }));
        const out = new Uint8Array(4 + parts.reduce((n, l) => n + 12 + l.strs.reduce((m, x) => m + 2 + x.length, 0), 0));
        const o = new DataView(out.buffer);
        o.setUint32(0, parts.length, true);
        let at = 4;
        for (const l of parts) {
          o.setUint32(at, (1 << CONTRACT_EXACT) | (1 << CONTRACT_FP32), true);
          o.setBigUint64(at + 4, l.ops, true); // the ops it offers: a subset of the table
          at += 12;
          for (const x of l.strs) {
            o.setUint16(at, x.length, true);
            out.set(x, at + 2);
            at += 2 + x.length;
          }
        }
        return out;
      }
      case T.CREATE: {
        if (p.byteLength < 8) refuse(S.INVALID_ARGUMENT, `create payload of ${p.byteLength} bytes is truncated`);
        const dtype = dv.getUint32(0, true); // 0 f32, 1 i32: 4-byte cells either way, copied as bits
        const ndim = dv.getUint32(4, true);
        if (dtype > 1) refuse(S.INVALID_ARGUMENT, `dtype ${dtype} is unknown (0 = f32, 1 = i32)`);
        if (ndim < 1 || ndim > MAX_RANK) refuse(S.SHAPE, `rank ${ndim}; a tensor has 1 to ${MAX_RANK} dimensions`);
        want(8 + 8 * ndim, 'create');
        const dims = [];
        for (let d = 0; d < ndim; d++) dims.push(Number(dv.getBigInt64(8 + 8 * d, true)));
        const numel = Session.shape(dims);
        if (this.tensors.size >= MAX_HANDLES) refuse(S.OUT_OF_MEMORY, `this connection holds ${MAX_HANDLES} tensors, the cap`);
        if (numel * 4 > MAX_RESIDENT - this.resident) refuse(S.OUT_OF_MEMORY, `a tensor of ${numel * 4} bytes would pass this tab's resident cap`);
        const id = BigInt(this.nextId++);
        this.tensors.set(id, { data: new Float32Array(Math.max(1, numel)), dims, numel, dtype });
        this.resident += numel * 4;
        const out = new Uint8Array(8);
        new DataView(out.buffer).setBigUint64(0, id, true);
        return out;
      }
      case T.WRITE:
      case T.READ: {
        if (type === T.READ) want(24, 'read');
        else if (p.byteLength < 24) refuse(S.INVALID_ARGUMENT, `write payload of ${p.byteLength} bytes is truncated`);
        const handle = dv.getBigUint64(0, true);
        const offset = dv.getBigUint64(8, true);
        const count = dv.getBigUint64(16, true);
        if (offset > BigInt(MAX_ELEMENTS) || count > BigInt(MAX_ELEMENTS)) refuse(S.SHAPE, `${count} elements at ${offset} is beyond any tensor`);
        const off = Number(offset);
        const n = Number(count);
        if (type === T.WRITE && n * 4 !== p.byteLength - 24) refuse(S.INVALID_ARGUMENT, `write claims ${n} floats but carries ${p.byteLength - 24} bytes of data`);
        if (type === T.READ && n * 4 + 8 > MAX_FRAME) refuse(S.OVERFLOW, `a read of ${n} floats would not fit one frame`);
        const t = this.tensor(handle, type === T.READ ? 'read' : 'write');
        if (off + n > t.numel) refuse(S.SHAPE, `${type === T.READ ? 'read' : 'write'} of ${n} floats at ${off} runs past a tensor of ${t.numel}`);
        if (type === T.WRITE) {
          // The payload sits 40 bytes into its message: 4-byte aligned, so the floats are viewed, not parsed.
          t.data.set(new Float32Array(p.buffer, p.byteOffset + 24, n), off);
          return new Uint8Array(0);
        }
        const out = new Uint8Array(8 + n * 4);
        new DataView(out.buffer).setBigUint64(0, BigInt(n), true);
        new Float32Array(out.buffer, 8, n).set(t.data.subarray(off, off + n));
        return out;
      }
      case T.FREE: {
        want(8, 'free');
        const handle = dv.getBigUint64(0, true);
        const t = this.tensor(handle, 'free');
        this.resident -= t.numel * 4;
        this.tensors.delete(handle);
        return new Uint8Array(0);
      }
      case T.RETYPE: {
        want(12, 'retype');
        const t = this.tensor(dv.getBigUint64(0, true), 'retype');
        const dtype = dv.getUint32(8, true);
        if (dtype > 1) refuse(S.INVALID_ARGUMENT, `dtype ${dtype} is unknown (0 = f32, 1 = i32)`);
        t.dtype = dtype; // the bits are unchanged
        return new Uint8Array(0);
      }
      case T.OP:
        if (p.byteLength < OP_HEAD) refuse(S.INVALID_ARGUMENT, `op payload of ${p.byteLength} bytes is truncated`);
        return this.op(dv, want);
      default:
        return refuse(S.INVALID_ARGUMENT, `unknown request type ${type}`);
    }
  }

  async op(dv, want) {
    const kind = dv.getUint32(0, true);
    const contract = dv.getUint32(4, true);
    const lane = dv.getInt32(8, true);
    const flags = dv.getUint32(12, true);
    const nin = dv.getUint8(16);
    const nout = dv.getUint8(17);
    if (kind >= OP_COUNT) refuse(S.UNSUPPORTED, `op kind ${kind} is not on the allow-list (0..${OP_COUNT - 1})`);
    if (!(this.offered() & (1n << BigInt(kind)))) refuse(S.UNSUPPORTED, `op kind ${kind} (${OPS[kind]}): this tab does not offer it (its lanes entry says so${kind >= V1_COUNT ? `; ${wasmWhy}` : ''})`);
    if (contract > 3) refuse(S.INVALID_ARGUMENT, `contract ${contract} is unknown`);
    if (contract !== CONTRACT_EXACT && contract !== CONTRACT_FP32) refuse(S.UNSUPPORTED, 'this tab honours the exact and fp32 contracts only');
    if (flags !== 0) refuse(S.INVALID_ARGUMENT, `op flags 0x${flags.toString(16)}: no flag is defined`);
    if (dv.getUint16(18, true) !== 0) refuse(S.INVALID_ARGUMENT, 'op bytes 18-19 are reserved and must be 0');
    const lanes = this.gpuOps.size ? 2 : 1;
    if (lane < -1 || lane >= lanes) refuse(S.NOT_FOUND, `lane ${lane}: this tab has ${lanes === 2 ? 'lanes 0 (cpu) and 1 (webgpu)' : 'one lane (0)'}`);
    const name = OPS[kind];
    if (lane === LANE_GPU && !this.gpuOps.has(name)) refuse(S.UNSUPPORTED, `${name}: this tab's GPU lane does not offer it (${gpuWhy[name] || 'no WebGPU kernel'})`);
    const [tin, tout] = SLOTS[name];
    if (nin > tin || nout > tout) refuse(S.INVALID_ARGUMENT, `${name} takes ${tin} inputs and ${tout} outputs; the op names ${nin} and ${nout}`);
    want(OP_HEAD + (nin + nout) * OP_ENTRY + OP_PARAMS, 'op');
    const at0 = OP_HEAD + (nin + nout) * OP_ENTRY;
    const ip = (i) => dv.getBigInt64(at0 + 8 * i, true);
    const fp = (i) => dv.getFloat32(at0 + 64 + 4 * i, true);
    const ranOn = (on) => {
      count(name, on);
      const out = new Uint8Array(4);
      new DataView(out.buffer).setInt32(0, on, true); // the lane that computed the result
      return out;
    };
    if (kind >= V1_COUNT) return ranOn(await this.opV2(kind, dv, nin, nout, at0, lane));
    // The version-1 ops' operands as slots 0, 1 (inputs) and 2, 3 (outputs), as the kernels below take them.
    const required = { matmul: 7, add: 7, relu_backward: 7, relu: 5, scale: 5, axpy: 5, sum_rows: 5, softmax_xent: 3 }[name];
    const v = [null, null, null, null]; // per slot: {t, dims, numel} or null
    for (let k = 0; k < 4; k++) {
      const isIn = k < 2;
      const idx = isIn ? k : k - 2;
      const given = isIn ? idx < nin : idx < nout;
      const entry = OP_HEAD + OP_ENTRY * (isIn ? idx : nin + idx);
      const handle = given ? dv.getBigUint64(entry, true) : 0n;
      if (handle === 0n) {
        if (required & (1 << k)) refuse(S.INVALID_ARGUMENT, `${name} needs a tensor in slot ${k}`);
        continue;
      }
      const nd = dv.getUint32(entry + 8, true);
      if (nd > MAX_RANK) refuse(S.SHAPE, `slot ${k}'s view has rank ${nd}; at most ${MAX_RANK}`);
      const vd = [];
      for (let d = 0; d < nd; d++) vd.push(Number(dv.getBigInt64(entry + 12 + 8 * d, true)));
      const vn = nd ? Session.shape(vd) : 0;
      const t = this.tensor(handle, `slot ${k}`);
      if (nd && vn > t.numel) refuse(S.SHAPE, `slot ${k}'s view of ${vn} elements exceeds its tensor's ${t.numel}`);
      v[k] = { t, dims: nd ? vd : t.dims, numel: nd ? vn : t.numel };
    }
    const ta = name === 'matmul' && ip(0) !== 0n;
    const tb = name === 'matmul' && ip(1) !== 0n;
    const alpha = fp(0);
    if (name === 'softmax_xent' && !v[2] && !v[3]) refuse(S.INVALID_ARGUMENT, 'softmax_xent needs a loss or a grad output');
    if (name === 'matmul') return ranOn(await this.matmul(v, ta, tb, lane));
    elementwise(name, v, alpha);
    return ranOn(LANE_CPU);
  }

  // Whether an op of `work` elements goes to the GPU: named lane 1, or lane -1 (the tab picks) and large.
  useGpu(name, lane, work) {
    if (!this.gpuOps.has(name)) return false;
    const min = gpuMin ?? (this.gpu.adapterInfo && this.gpu.adapterInfo.isFallbackAdapter ? Infinity : GPU_MIN_DEFAULT);
    return lane === LANE_GPU || (lane === -1 && work > 0 && work >= min);
  }

  // The GPU lane's ops, as the LANES mask.
  gpuMask() {
    let m = 0n;
    for (const n of this.gpuOps) m |= 1n << BigInt(OPS.indexOf(n));
    return m;
  }

  // The ops this tab offers (the LANES mask): the version-1 set, and the version-2 ops when weft.wasm is here.
  offered() {
    return OPS_V1 | (this.wasm ? OPS_WASM : 0n);
  }

  // One operand of an OP frame: {t, numel, dtype} or null when its handle is 0.
  operand(dv, entry, what) {
    const handle = dv.getBigUint64(entry, true);
    if (handle === 0n) return null;
    const nd = dv.getUint32(entry + 8, true);
    if (nd > MAX_RANK) refuse(S.SHAPE, `${what}'s view has rank ${nd}; at most ${MAX_RANK}`);
    const vd = [];
    for (let d = 0; d < nd; d++) vd.push(Number(dv.getBigInt64(entry + 12 + 8 * d, true)));
    const vn = nd ? Session.shape(vd) : 0;
    const t = this.tensor(handle, what);
    if (nd && vn > t.numel) refuse(S.SHAPE, `${what}'s view of ${vn} elements exceeds its tensor's ${t.numel}`);
    return { t, dims: nd ? vd : t.dims, numel: nd ? vn : t.numel };
  }

  // A version-2 op: on the GPU (see useGpu) when it has a kernel for it and the values allow, else through
  // weft.wasm: each operand's elements are copied into the module's memory, the C reference runs on them,
  // and the outputs (read and written ones included) are copied back, bit for bit. Returns the lane that
  // computed the result.
  async opV2(kind, dv, nin, nout, at0, lane) {
    const name = OPS[kind];
    const wire = [];
    for (let i = 0; i < 8; i++) wire.push(dv.getBigInt64(at0 + 8 * i, true));
    // The parameters travel as weft_op_params (include/weft.h): f as the kernels take them, i per op.
    const fpBits = new Uint32Array(8);
    for (let i = 0; i < 8; i++) fpBits[i] = dv.getUint32(at0 + 64 + 4 * i, true);
    const ins = [];
    const outs = [];
    for (let k = 0; k < nin; k++) ins.push(this.operand(dv, OP_HEAD + OP_ENTRY * k, `${name} input ${k}`));
    for (let k = 0; k < nout; k++) outs.push(this.operand(dv, OP_HEAD + OP_ENTRY * (nin + k), `${name} output ${k}`));
    const ip = kernelParams(kind, ins, outs, wire);
    const need = needs(kind, ip);
    const check = (list, want, kindOf) => {
      want.forEach(([n, required, dtype], k) => {
        const o = list[k] || null;
        list[k] = o;
        if (!o) {
          if (required) refuse(S.INVALID_ARGUMENT, `${name} needs its ${kindOf} ${k}`);
          return;
        }
        if (o.numel < n) refuse(S.SHAPE, `${name}: ${kindOf} ${k} has ${o.numel} elements; the parameters need ${n}`);
        const dt = dtype === 'same' ? (ins[0] ? ins[0].t.dtype : DT_F32) : dtype;
        if (o.t.dtype !== dt) refuse(S.INVALID_ARGUMENT, `${name}: ${kindOf} ${k} is ${o.t.dtype ? 'i32' : 'f32'}; the op takes ${dt ? 'i32' : 'f32'}`);
        o.n = n;
      });
    };
    check(ins, need.in, 'input');
    check(outs, need.out, 'output');
    const bitsOf = (o) => new Uint32Array(o.t.data.buffer, o.t.data.byteOffset, o.n);
    if (TX_GPU_OPS[name] && this.useGpu(name, lane, gpuWork(name, ip))) {
      const r = await this.txOnGpu(name, ins.map((o) => o && bitsOf(o)), outs.map((o) => o && bitsOf(o)), ip, fpBits);
      if (r) {
        r.forEach((cells, k) => cells && outs[k] && bitsOf(outs[k]).set(cells));
        return LANE_GPU;
      }
    }
    const w = this.wasm;
    const ptrs = [];
    const alloc = (o) => {
      if (!o) return 0;
      const p = w.weft_wasm_alloc(Math.max(4, o.n * 4));
      if (!p) refuse(S.OUT_OF_MEMORY, `${name}: weft.wasm is out of memory for ${o.n * 4} bytes`);
      ptrs.push(p);
      return p;
    };
    try {
      const pin = ins.map(alloc);
      const pout = outs.map(alloc);
      // Views of the memory after every allocation (growing it detaches the old buffer).
      const mem = w.memory.buffer;
      const cells = (p, n) => new Uint32Array(mem, p, n);
      ins.forEach((o, k) => o && cells(pin[k], o.n).set(bitsOf(o)));
      outs.forEach((o, k) => o && cells(pout[k], o.n).set(bitsOf(o)));
      const inA = new Uint32Array(mem, w.weft_wasm_op_in(), 6);
      const outA = new Uint32Array(mem, w.weft_wasm_op_out(), 4);
      inA.fill(0);
      outA.fill(0);
      pin.forEach((p, k) => (inA[k] = p));
      pout.forEach((p, k) => (outA[k] = p));
      new BigInt64Array(mem, w.weft_wasm_op_iparam(), 8).set(ip);
      new Uint32Array(mem, w.weft_wasm_op_fparam(), 8).set(fpBits);
      const st = w.weft_wasm_run(kind);
      if (st !== 0) refuse(st, `${name}: ${st === S.INVALID_ARGUMENT ? 'an index is out of range (or an operand is missing)' : 'the shapes do not fit the kernel'}`);
      outs.forEach((o, k) => o && bitsOf(o).set(new Uint32Array(w.memory.buffer, pout[k], o.n)));
    } finally {
      for (const p of ptrs) w.weft_wasm_free(p);
    }
    return LANE_CPU;
  }

  // A transformer op on the GPU: its outputs' cells (per output slot, null where absent), or null when the
  // GPU cannot be exact on these values or bind them (the CPU computes it then). A GPU that failed fails
  // the lane: the fabric takes it out and runs the op elsewhere.
  async txOnGpu(name, ins, outs, ip, fpBits) {
    const [N, C] = [ip[0], ip[1]].map(Number);
    let args;
    switch (name) {
      case 'gelu': args = { x: ins[0], n: N }; break;
      case 'gelu_backward': args = { x: ins[0], dy: ins[1], n: N }; break;
      case 'layernorm': args = { x: ins[0], gamma: ins[1], beta: ins[2], N, C, eps: fpBits[0] }; break;
      case 'layernorm_backward':
        args = { dy: ins[0], x: ins[1], mean: ins[2], rstd: ins[3], gamma: ins[4], dgamma: outs[1], dbeta: outs[2], N, C };
        break;
      case 'causal_softmax': args = { scores: ins[0], R: N, T: C, scale: fpBits[0] }; break;
      case 'causal_softmax_backward': args = { probs: ins[0], dprobs: ins[1], R: N, T: C, scale: fpBits[0] }; break;
      default: return null;
    }
    let r;
    try {
      r = await txGpu(this.gpu, name, args);
    } catch (e) {
      if (e instanceof RangeError) return null;
      refuse(S.LANE_FAILED, `WebGPU failed: ${e && e.message ? e.message : e}`);
    }
    if (!r) return null;
    switch (name) {
      case 'gelu': return [r.y];
      case 'gelu_backward': return [r.dx];
      case 'layernorm': return [r.y, r.mean, r.rstd];
      case 'layernorm_backward': return [r.dx, r.dgamma, r.dbeta];
      case 'causal_softmax': return [r.probs];
      default: return [r.dscores];
    }
  }

  // Returns the lane that computed the product.
  async matmul(v, ta, tb, lane) {
    const [a, b, c] = v;
    if (a.dims.length < 2 || b.dims.length < 2 || c.dims.length < 2) refuse(S.SHAPE, 'matmul operands need rank >= 2');
    const last2 = (x) => [x.dims[x.dims.length - 2], x.dims[x.dims.length - 1]];
    const [ar, ac] = last2(a);
    const [br, bc] = last2(b);
    const m = ta ? ac : ar;
    const k = ta ? ar : ac;
    const kb = tb ? bc : br;
    const n = tb ? br : bc;
    const batch = a.numel / (m * k);
    const bBatched = b.dims.length > 2;
    if (kb !== k) refuse(S.SHAPE, `matmul: a has k = ${k}, b has ${kb}`);
    if (bBatched && b.numel !== batch * k * n) refuse(S.SHAPE, 'matmul: a batched b must have a\'s batch');
    if (!bBatched && b.numel !== k * n) refuse(S.SHAPE, 'matmul: b is not k x n');
    const [cm, cn] = last2(c);
    if (cm !== m || cn !== n || c.numel !== batch * m * n) refuse(S.SHAPE, 'matmul: c is not [batch, m, n]');
    const A = a.t.data;
    const B = b.t.data;
    const aOf = (p) => orient(A.subarray(p * m * k, (p + 1) * m * k), ta, m, k);
    const bOf = (p) => orient(bBatched ? B.subarray(p * k * n, (p + 1) * k * n) : B.subarray(0, k * n), tb, k, n);
    const out = new Float32Array(batch * m * n);
    // On the GPU only when every entry of the batch can be exact there, so one lane computed the result.
    let on = this.useGpu('matmul', lane, batch * m * k * n) ? LANE_GPU : LANE_CPU;
    if (on === LANE_GPU) {
      for (let p = 0; on === LANE_GPU && p < batch; p++) if (!gpuCanBeExact(aOf(p), bOf(p), m, k, n)) on = LANE_CPU;
    }
    for (let p = 0; p < batch; p++) {
      const ap = aOf(p);
      const bp = bOf(p);
      let r = null;
      if (on === LANE_GPU) {
        try {
          r = await matmulGpu(this.gpu, ap, bp, m, k, n);
        } catch (e) {
          // Too large for the GPU's bindings: the CPU computes it. A lost device is the lane's failure: the
          // fabric takes the lane out and runs the op elsewhere.
          if (!(e instanceof RangeError)) refuse(S.LANE_FAILED, `WebGPU failed: ${e && e.message ? e.message : e}`);
        }
        if (!r) {
          on = LANE_CPU;
          for (let q = 0; q < p; q++) out.set(this.matmulCpu(aOf(q), bOf(q), m, k, n), q * m * n);
        }
      }
      out.set(r || this.matmulCpu(ap, bp, m, k, n), p * m * n);
    }
    canonicalNaN(out, out.length);
    c.t.data.set(out);
    return on;
  }

  // One m x k x n matmul on the CPU: weft.wasm's gemm (the native CPU lane's code, exact) when it is here,
  // else the canonical loop in JavaScript.
  matmulCpu(a, b, m, k, n) {
    const w = this.wasm;
    if (!w || typeof w.weft_wasm_matmul !== 'function' || !m || !n) return matmulCanonical(a, b, m, k, n);
    const pa = w.weft_wasm_alloc(Math.max(4, m * k * 4));
    const pb = pa && w.weft_wasm_alloc(Math.max(4, k * n * 4));
    const pc = pb && w.weft_wasm_alloc(m * n * 4);
    try {
      if (!pc) return matmulCanonical(a, b, m, k, n);
      const mem = w.memory.buffer;
      new Float32Array(mem, pa, m * k).set(a.subarray(0, m * k));
      new Float32Array(mem, pb, k * n).set(b.subarray(0, k * n));
      if (w.weft_wasm_matmul(pa, pb, pc, m, k, n) !== 0) return matmulCanonical(a, b, m, k, n);
      return new Float32Array(w.memory.buffer, pc, m * n).slice();
    } finally {
      for (const ptr of [pa, pb, pc]) if (ptr) w.weft_wasm_free(ptr);
    }
  }
}

// The op table's kernel parameters (the iparam of /src/core/optable.c's validators) from the operands'
// views and the public parameters of the frame, as `weft worker` derives them from its tensors' shapes.
function kernelParams(kind, ins, outs, wire) {
  const name = OPS[kind];
  const op = (o, what) => {
    if (!o) refuse(S.INVALID_ARGUMENT, `${name} needs its ${what}`);
    return o;
  };
  const last = (o) => o.dims[o.dims.length - 1];
  const rows = (o) => (last(o) ? o.numel / last(o) : 0);
  const b3 = (o, what) => {
    if (op(o, what).dims.length !== 3) refuse(S.SHAPE, `${name}: ${what} must be [B, T, x]`);
    return o.dims;
  };
  const big = (xs) => {
    const out = xs.map((x) => BigInt(x));
    while (out.length < 8) out.push(0n);
    return out;
  };
  switch (name) {
    case 'embedding': {
      const tok = op(ins[0], 'tok');
      const T = last(tok);
      const C = last(op(outs[0], 'out'));
      return big([rows(tok), T, C, C ? op(ins[2], 'wte').numel / C : 0, C ? op(ins[3], 'wpe').numel / C : 0]);
    }
    case 'embedding_backward': {
      const [B, T, C] = b3(ins[0], 'dout');
      const tab = (o) => (o ? (C ? o.numel / C : 0) : 2 ** 31);
      if (!outs[0] && !outs[1]) refuse(S.INVALID_ARGUMENT, `${name} needs dwte or dwpe`);
      return big([B, T, C, tab(outs[0]), tab(outs[1])]);
    }
    case 'layernorm':
    case 'layernorm_backward': {
      const x = op(ins[0], 'x');
      return big([rows(x), last(x)]);
    }
    case 'gelu':
    case 'gelu_backward':
    case 'sumsq':
      return big([op(ins[0], 'x').numel]);
    case 'adamw':
      return big([op(ins[0], 'grad').numel]);
    case 'attention': {
      const [B, T, C3] = b3(ins[0], 'qkv');
      return big([B, T, C3 / 3, wire[0]]);
    }
    case 'attention_backward': {
      const [B, T, C] = b3(ins[0], 'dout');
      return big([B, T, C, wire[0]]);
    }
    case 'attention_cached': {
      // The cache qkv [B, Tmax, 3C], out [B, Tq, C], att [B, NH, Tq, Tmax]; queries at t0 .. t0+Tq-1.
      const [B, Tmax, C3] = b3(ins[0], 'qkv');
      if (C3 % 3) refuse(S.SHAPE, `${name}: qkv [${B}, ${Tmax}, ${C3}] is not a cache [B, Tmax, 3C]`);
      const C = C3 / 3;
      const o = op(outs[0], 'out');
      if (o.dims.length !== 3 || o.dims[0] !== B || o.dims[2] !== C) refuse(S.SHAPE, `${name}: out must be [B, Tq, C] = [${B}, Tq, ${C}]`);
      const Tq = o.dims[1];
      const t0 = wire[1];
      if (t0 < 0n || t0 + BigInt(Tq) > BigInt(Tmax)) refuse(S.SHAPE, `${name}: query positions ${t0} .. ${t0 + BigInt(Tq) - 1n} are not within the cache's ${Tmax}`);
      const a = outs[1];
      const want = [B, Number(wire[0]), Tq, Tmax];
      if (a && (a.dims.length !== 4 || a.dims.some((d, i) => d !== want[i]))) refuse(S.SHAPE, `${name}: att must be [B, NH, Tq, Tmax] = [${want.join(', ')}]`);
      return big([B, Tmax, C, wire[0], t0, Tq]);
    }
    case 'causal_softmax':
    case 'causal_softmax_backward': {
      const x = op(ins[0], 'scores');
      const T = last(x);
      return big([T ? x.numel / (T * T) : 0, T]);
    }
    case 'crossentropy':
    case 'crossentropy_backward': {
      const x = op(ins[0], 'logits');
      return big([rows(x), last(x)]);
    }
    case 'permute': {
      const x = op(ins[0], 'x');
      const rank = x.dims.length;
      const dims = [1, 1, 1, 1];
      let packed = 0;
      for (let a = 0; a < 4; a++) {
        if (a < rank) dims[a] = x.dims[a];
        const p = a < rank ? wire[a] : BigInt(a);
        if (p < 0n || p >= BigInt(rank > a ? rank : 4)) refuse(S.INVALID_ARGUMENT, `permute: axis ${p} is out of range`);
        packed |= Number(p) << (2 * a);
      }
      return big([rank, ...dims, packed]);
    }
    case 'copy_slice': {
      const src = op(ins[0], 'src');
      const dst = op(outs[0], 'dst');
      const axis = Number(wire[0]);
      const r = src.dims.length;
      if (dst.dims.length !== r || !(axis >= 0 && axis < r)) refuse(S.SHAPE, `copy_slice: axis ${axis} of rank ${r} and ${dst.dims.length}`);
      let outer = 1;
      let inner = 1;
      for (let a = 0; a < r; a++) {
        if (a !== axis && src.dims[a] !== dst.dims[a]) refuse(S.SHAPE, `copy_slice: src and dst differ on axis ${a}`);
        if (a < axis) outer *= src.dims[a];
        if (a > axis) inner *= src.dims[a];
      }
      if (wire[1] < 0n) refuse(S.SHAPE, `copy_slice: offset ${wire[1]}`);
      return big([outer, src.dims[axis], dst.dims[axis], inner, wire[1]]);
    }
    default:
      return refuse(S.UNSUPPORTED, `op kind ${kind} is not implemented here`);
  }
}

// What a version-2 op's parameters make of its operands: per input and output slot [elements it needs,
// required, dtype] (src/core/optable.c's validators, as the host checks them before dispatch). A tab checks
// again, so no request reads or writes past a tensor.
function needs(kind, ipBig) {
  const ip = ipBig.map((x) => {
    if (x < 0n || x > 2n ** 31n) refuse(S.SHAPE, `${OPS[kind]}: parameter ${x} is out of range (0 .. 2^31)`);
    return Number(x);
  });
  const cap = (...xs) => {
    const n = xs.reduce((a, b) => a * b, 1);
    if (n > MAX_ELEMENTS) refuse(S.OVERFLOW, `${OPS[kind]}: the parameters make ${n} elements; the cap is ${MAX_ELEMENTS}`);
    return n;
  };
  const F = DT_F32;
  const I = DT_I32;
  switch (OPS[kind]) {
    case 'embedding': {
      const [B, T, C, V, P] = ip;
      return { in: [[cap(B, T), 1, I], [cap(B, T), 0, I], [cap(V, C), 1, F], [cap(P, C), 1, F]], out: [[cap(B, T, C), 1, F]] };
    }
    case 'embedding_backward': {
      const [B, T, C, V, P] = ip;
      const tab = (n) => (n === 2 ** 31 ? 0 : cap(n, C));
      return { in: [[cap(B, T, C), 1, F], [cap(B, T), 1, I], [cap(B, T), 0, I]], out: [[tab(V), 0, F], [tab(P), 0, F]] };
    }
    case 'layernorm': {
      const [N, C] = ip;
      return { in: [[cap(N, C), 1, F], [C, 1, F], [C, 1, F]], out: [[cap(N, C), 1, F], [N, 0, F], [N, 0, F]] };
    }
    case 'layernorm_backward': {
      const [N, C] = ip;
      return { in: [[cap(N, C), 1, F], [cap(N, C), 1, F], [N, 1, F], [N, 1, F], [C, 1, F]],
        out: [[cap(N, C), 1, F], [C, 0, F], [C, 0, F]] };
    }
    case 'gelu':
      return { in: [[cap(ip[0]), 1, F]], out: [[ip[0], 1, F]] };
    case 'gelu_backward':
      return { in: [[cap(ip[0]), 1, F], [ip[0], 1, F]], out: [[ip[0], 1, F]] };
    case 'attention':
    case 'attention_backward': {
      const [B, T, C, NH] = ip;
      if (NH < 1 || C % NH) refuse(S.SHAPE, `${OPS[kind]}: C = ${C} is not a multiple of NH = ${NH}`);
      const qkv = cap(B, T, 3 * C);
      const att = cap(B, NH, T, T);
      if (OPS[kind] === 'attention') return { in: [[qkv, 1, F]], out: [[cap(B, T, C), 1, F], [att, 1, F], [att, 0, F]] };
      return { in: [[cap(B, T, C), 1, F], [qkv, 1, F], [att, 1, F]], out: [[qkv, 1, F]] };
    }
    case 'attention_cached': {
      const [B, Tmax, C, NH, t0, Tq] = ip;
      if (NH < 1 || C % NH) refuse(S.SHAPE, `${OPS[kind]}: C = ${C} is not a multiple of NH = ${NH}`);
      if (t0 + Tq > Tmax) refuse(S.SHAPE, `${OPS[kind]}: t0 + Tq = ${t0 + Tq} is past the cache's ${Tmax} positions`);
      return { in: [[cap(B, Tmax, 3 * C), 1, F]], out: [[cap(B, Tq, C), 1, F], [cap(B, NH, Tq, Tmax), 0, F]] };
    }
    case 'causal_softmax': {
      const n = cap(ip[0], ip[1], ip[1]);
      return { in: [[n, 1, F]], out: [[n, 1, F]] };
    }
    case 'causal_softmax_backward': {
      const n = cap(ip[0], ip[1], ip[1]);
      return { in: [[n, 1, F], [n, 1, F]], out: [[n, 1, F]] };
    }
    case 'crossentropy': {
      const [N, V] = ip;
      return { in: [[cap(N, V), 1, F], [N, 1, I]], out: [[N, 1, F]] };
    }
    case 'crossentropy_backward': {
      const [N, V] = ip;
      return { in: [[cap(N, V), 1, F], [N, 1, I], [N, 1, F]], out: [[cap(N, V), 1, F]] };
    }
    case 'adamw': {
      const n = cap(ip[0]);
      return { in: [[n, 1, F]], out: [[n, 1, F], [n, 1, F], [n, 1, F]] };
    }
    case 'sumsq':
      return { in: [[cap(ip[0]), 1, F]], out: [[1, 1, F]] };
    case 'permute': {
      const rank = ip[0];
      if (rank < 1 || rank > 4) refuse(S.SHAPE, `permute: rank ${rank}; 1 to 4`);
      const dims = ip.slice(1, 5);
      if (dims.some((d) => d < 1)) refuse(S.SHAPE, 'permute: a dimension is 0');
      const seen = new Set();
      for (let a = 0; a < 4; a++) seen.add((ip[5] >> (2 * a)) & 3);
      if (seen.size !== 4 || ip[5] > 255) refuse(S.INVALID_ARGUMENT, `permute: 0x${ip[5].toString(16)} is not a permutation of 4 axes`);
      const n = cap(...dims);
      return { in: [[n, 1, 'same']], out: [[n, 1, 'same']] };
    }
    case 'copy_slice': {
      const [outer, sl, dl, inner, off] = ip;
      if (off + sl > dl) refuse(S.SHAPE, `copy_slice: ${sl} rows at ${off} run past ${dl}`);
      return { in: [[cap(outer, sl, inner), 1, 'same']], out: [[cap(outer, dl, inner), 1, 'same']] };
    }
    default:
      return refuse(S.UNSUPPORTED, `op kind ${kind} is not implemented here`);
  }
}

// An op's work in elements, for the tab's choice of lane: what its GPU kernels touch.
function gpuWork(name, ip) {
  const [a, b] = [Number(ip[0]), Number(ip[1])];
  if (name === 'gelu' || name === 'gelu_backward') return a;
  if (name === 'layernorm' || name === 'layernorm_backward') return a * b;
  return a * b * b; // the causal softmax: R blocks of T x T
}

// A (rows x cols) operand, given as stored: transposed ones are copied into row-major order first.
function orient(x, trans, rows, cols) {
  if (!trans) return x;
  const out = new Float32Array(rows * cols);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) out[i * cols + j] = x[j * rows + i];
  return out;
}

// The elementwise ops, in the canonical order of src/core/reference.c.
function elementwise(name, v, alpha) {
  const x = v[0];
  const cols = x.dims[x.dims.length - 1];
  const count = x.numel;
  const rows = cols ? count / cols : 0;
  const X = x.t.data;
  const same = (s, what) => {
    if (!s || s.numel !== count) refuse(S.SHAPE, `${name}: ${what} must have ${count} elements`);
    return s.t.data;
  };
  switch (name) {
    case 'add': {
      const y = v[1];
      const bcast = y.numel === cols && count !== cols;
      const Y = bcast ? y.t.data : same(y, 'y');
      const O = same(v[2], 'out');
      for (let e = 0; e < count; e++) O[e] = X[e] + Y[bcast ? e % cols : e];
      canonicalNaN(O, count);
      return;
    }
    case 'relu': {
      const O = same(v[2], 'out');
      for (let e = 0; e < count; e++) O[e] = X[e] > 0 ? X[e] : X[e] !== X[e] ? X[e] : 0;
      canonicalNaN(O, count);
      return;
    }
    case 'relu_backward': {
      const Y = same(v[1], 'x');
      const O = same(v[2], 'out');
      for (let e = 0; e < count; e++) O[e] = Y[e] > 0 ? X[e] : 0;
      canonicalNaN(O, count);
      return;
    }
    case 'scale': {
      const O = same(v[2], 'out');
      for (let e = 0; e < count; e++) O[e] = alpha * X[e];
      canonicalNaN(O, count);
      return;
    }
    case 'axpy': {
      const O = same(v[2], 'y');
      for (let e = 0; e < count; e++) O[e] = f(alpha * X[e]) + O[e];
      canonicalNaN(O, count);
      return;
    }
    case 'sum_rows': {
      const o = v[2];
      if (o.numel !== cols) refuse(S.SHAPE, `sum_rows: out must have ${cols} elements`);
      const O = o.t.data;
      for (let j = 0; j < cols; j++) {
        let acc = 0;
        for (let i = 0; i < rows; i++) acc = f(acc + X[i * cols + j]);
        O[j] = acc;
      }
      canonicalNaN(O, cols);
      return;
    }
    case 'softmax_xent': {
      const Tg = same(v[1], 'targets');
      if (v[2] && v[2].numel !== 1) refuse(S.SHAPE, 'softmax_xent: loss must have 1 element');
      const G = v[3] ? same(v[3], 'grad') : null;
      const invRows = f(1 / f(rows));
      let tot = 0;
      for (let i = 0; i < rows; i++) {
        const r = i * cols;
        let mx = X[r];
        for (let j = 1; j < cols; j++) mx = X[r + j] > mx ? X[r + j] : mx;
        let s = 0;
        for (let j = 0; j < cols; j++) s = f(s + expf(f(X[r + j] - mx)));
        const ls = logf(s);
        let acc = 0;
        for (let j = 0; j < cols; j++) {
          const lsm = f(f(X[r + j] - mx) - ls);
          acc = f(acc + f(Tg[r + j] * lsm));
          if (G) G[r + j] = f(expf(lsm) - Tg[r + j]) * invRows;
        }
        tot = f(tot + -acc);
      }
      if (v[2]) {
        v[2].t.data[0] = tot * invRows;
        canonicalNaN(v[2].t.data, 1);
      }
      if (G) canonicalNaN(G, count);
      return;
    }
    default:
      refuse(S.UNSUPPORTED, `op ${name} is not implemented here`);
  }
}

// --------------------------------------------------------------------------------------------- frames

function frame(type, requestId, st, payload) {
  const out = new Uint8Array(16 + payload.length);
  const o = new DataView(out.buffer);
  o.setUint32(0, MAGIC, true);
  o.setUint16(4, type | REPLY, true);
  o.setUint16(6, st, true);
  o.setUint32(8, requestId, true);
  o.setUint32(12, payload.length, true);
  out.set(payload, 16);
  return out;
}

// One message in, one reply out; [reply, close].
export async function answer(session, buf) {
  const msg = new Uint8Array(buf);
  if (msg.length < 16) return [null, true];
  const h = new DataView(buf);
  const type = h.getUint16(4, true);
  const id = h.getUint32(8, true);
  const length = h.getUint32(12, true);
  const fail = (st, text, close) => [frame(type, id, st, new TextEncoder().encode(text).subarray(0, 512)), close];
  // The stream is one frame per message: a frame that is not whole, or not ours, ends the connection.
  if (h.getUint32(0, true) !== MAGIC) return fail(S.INVALID_ARGUMENT, 'bad frame magic: not a weft peer', true);
  if (length > MAX_FRAME) return fail(S.OVERFLOW, `frame payload of ${length} bytes exceeds this tab's cap of ${MAX_FRAME}`, true);
  if (length !== msg.length - 16) return fail(S.INVALID_ARGUMENT, `the header says ${length} payload bytes, the message carries ${msg.length - 16}`, true);
  try {
    return [frame(type, id, S.OK, await session.handle(type, msg.subarray(16))), false];
  } catch (e) {
    if (e instanceof Refusal) return fail(e.status, e.message, e.close);
    return fail(S.INTERNAL, `the tab failed: ${e && e.message ? e.message : e}`, false);
  }
}

let gpu = null;
let retryMs = 1000;

function connect(url) {
  status.server = url;
  status.state = 'connecting';
  report();
  const ws = new WebSocket(url, 'weft');
  ws.binaryType = 'arraybuffer';
  const session = new Session(gpu, currentSecret(), new URL(url).host);
  let chain = Promise.resolve();
  ws.onopen = () => {
    status.state = 'connected: waiting for the fabric';
    status.closeReason = '';
    retryMs = 1000;
    report();
  };
  ws.onmessage = (ev) => {
    // One request at a time, in order, even when an op awaits the GPU.
    chain = chain.then(async () => {
      if (typeof ev.data === 'string') {
        ws.close(1003, 'the protocol is binary frames');
        return;
      }
      const [reply, close] = await answer(session, ev.data);
      if (ws.readyState !== WebSocket.OPEN) return;
      if (reply) ws.send(reply);
      if (session.hello && status.state !== 'serving') {
        status.state = 'serving';
        report();
      }
      if (close) ws.close(1008, 'protocol violation');
    });
  };
  ws.onclose = (ev) => {
    status.state = 'disconnected';
    status.closeReason = ev.reason ? `the fabric closed the connection: ${ev.reason}` : `closed (code ${ev.code})`;
    report();
    // The fabric may come back (weft serve restarted) or a slot may free up: try again, more slowly.
    setTimeout(() => connect(url), retryMs);
    retryMs = Math.min(retryMs * 2, 15000);
  };
}

// Opens the GPU and connects to the fabric at `url`; `secret()` gives the shared secret (or '') at each
// connection, `onStatus(status)` hears every change of state.
export async function startWorker({ url, secret, onStatus, gpuMin: min }) {
  currentSecret = secret;
  if (Number.isFinite(min) && min >= 0) gpuMin = min;
  report = () => onStatus({ ...status, ran: JSON.parse(JSON.stringify(status.ran)) });
  try {
    // The version-2 ops' C reference, built for the browser; without it the tab offers the version-1 ops.
    await loadWasm(new URL('../wasm/weft.wasm', import.meta.url));
    gpu = await openGpu();
    const cpu = `JavaScript${sharedWasm ? ' and WebAssembly' : ''} on the CPU`;
    if (gpu) {
      const i = gpu.adapterInfo;
      const words = [i.vendor, i.architecture, i.device, i.description].filter((w) => w).join(' ');
      status.device = `WebGPU: ${words || 'unnamed adapter'}${i.isFallbackAdapter ? ' (fallback adapter' +
        `${gpuMin === null ? ': run only when the page\'s address sets gpu_min' : ''})` : ''}`;
      status.cpu = cpu;
      await findGpuOps();
    } else {
      status.device = `${cpu} (no WebGPU: ${noGpuReason})`;
      status.cpu = status.device;
    }
    connect(url);
    // The ops counter, twice a second rather than per op: a tiny op's round trip is a few hundred us.
    setInterval(report, 500);
  } catch (e) {
    status.state = 'failed';
    status.error = String(e && e.message ? e.message : e);
    report();
  }
}

// Which ops this tab's GPU runs: each kernel compiled here (a tiny matmul builds matmul's); the others are
// left to the CPU lane, and status.error says why.
async function findGpuOps() {
  const ops = new Set();
  const why = {};
  try {
    await matmulGpu(gpu, new Float32Array([1, 2, 3, 4]), new Float32Array([1, 0, 0, 1]), 2, 2, 2);
    ops.add('matmul');
  } catch (e) {
    why.matmul = e && e.message ? e.message : String(e);
  }
  try {
    const ready = await prepareTx(gpu);
    for (const op of ready.ops) ops.add(op);
    Object.assign(why, ready.why);
  } catch (e) {
    for (const op of Object.keys(TX_GPU_OPS)) why[op] = e && e.message ? e.message : String(e);
  }
  gpuOps = ops;
  gpuWhy = why;
  const left = Object.entries(why);
  if (left.length) status.error = `not on WebGPU here: ${left.map(([op, w]) => `${op} (${w})`).join('; ')}`;
}

// In a dedicated Worker: wait for the page to say where the fabric is.
if (typeof WorkerGlobalScope !== 'undefined' && self instanceof WorkerGlobalScope) {
  let secret = '';
  let started = false;
  self.onmessage = (ev) => {
    const m = ev.data || {};
    if (typeof m.secret === 'string') secret = m.secret;
    if (m.url && !started) {
      started = true;
      startWorker({ url: m.url, secret: () => secret, gpuMin: m.gpuMin, onStatus: (st) => self.postMessage(st) });
    }
  };
}
