// worker_wasm.mjs - the worker page's version-2 ops (worker.js's Session over weft.wasm) against requests a
// fabric could send wrong: each is refused with its status, none reads or writes past a tensor, and a page
// without the module offers the version-1 ops only. The bits themselves are checked against the CPU lane in
// real Chromium by browser_lane.c.
//   node worker_wasm.mjs WEB_DIR   (the assembled <build>/web, with wasm/weft.wasm)
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const web = process.argv[2];
const { Session, answer, loadWasm } = await import(pathToFileURL(path.join(web, 'worker', 'worker.js')).href);
let failures = 0;
let checks = 0;
const check = (cond, what) => {
  checks++;
  if (!cond) {
    failures++;
    console.log(`FAIL ${what}`);
  }
};

const MAGIC = 0x54464557;
let nextId = 1;
async function call(s, type, payload) {
  const buf = new ArrayBuffer(16 + payload.length);
  const h = new DataView(buf);
  h.setUint32(0, MAGIC, true);
  h.setUint16(4, type, true);
  h.setUint32(8, nextId++, true);
  h.setUint32(12, payload.length, true);
  new Uint8Array(buf).set(payload, 16);
  const [reply] = await answer(s, buf);
  const r = new DataView(reply.buffer);
  return { st: r.getUint16(6, true), body: reply.subarray(16), text: new TextDecoder().decode(reply.subarray(16)) };
}
const bytes = (n, fill) => {
  const b = new Uint8Array(n);
  fill(new DataView(b.buffer));
  return b;
};
const hello = (s) => call(s, 1, bytes(8, (d) => d.setUint32(0, 2, true)));
async function create(s, dims, dtype = 0) {
  const r = await call(s, 4, bytes(8 + 8 * dims.length, (d) => {
    d.setUint32(0, dtype, true);
    d.setUint32(4, dims.length, true);
    dims.forEach((x, i) => d.setBigInt64(8 + 8 * i, BigInt(x), true));
  }));
  return new DataView(r.body.buffer, r.body.byteOffset).getBigUint64(0, true);
}
const write = (s, h, cells) => call(s, 5, bytes(24 + 4 * cells.length, (d) => {
  d.setBigUint64(0, h, true);
  d.setBigUint64(16, BigInt(cells.length), true);
  cells.forEach((c, i) => d.setFloat32(24 + 4 * i, c, true));
}));
const writeI32 = (s, h, cells) => call(s, 5, bytes(24 + 4 * cells.length, (d) => {
  d.setBigUint64(0, h, true);
  d.setBigUint64(16, BigInt(cells.length), true);
  cells.forEach((c, i) => d.setInt32(24 + 4 * i, c, true));
}));
async function read(s, h, n) {
  const r = await call(s, 6, bytes(24, (d) => {
    d.setBigUint64(0, h, true);
    d.setBigUint64(16, BigInt(n), true);
  }));
  return new Float32Array(r.body.slice(8).buffer);
}
const retype = (s, h, dtype) => call(s, 12, bytes(12, (d) => {
  d.setBigUint64(0, h, true);
  d.setUint32(8, dtype, true);
}));
// operands: [handle, dims (view) or []], in then out; ip, fp: the frame's weft_op_params.
function op(s, kind, ins, outs, ip = [], fp = []) {
  const all = [...ins, ...outs];
  return call(s, 8, bytes(20 + 44 * all.length + 96, (d) => {
    d.setUint32(0, kind, true);
    d.setInt32(8, -1, true);
    d.setUint8(16, ins.length);
    d.setUint8(17, outs.length);
    all.forEach(([h, dims], k) => {
      const e = 20 + 44 * k;
      d.setBigUint64(e, h, true);
      d.setUint32(e + 8, dims.length, true);
      dims.forEach((x, i) => d.setBigInt64(e + 12 + 8 * i, BigInt(x), true));
    });
    const at = 20 + 44 * all.length;
    ip.forEach((x, i) => d.setBigInt64(at + 8 * i, BigInt(x), true));
    fp.forEach((x, i) => d.setFloat32(at + 64 + 4 * i, x, true));
  }));
}
const S = { OK: 0, INVALID_ARGUMENT: 1, SHAPE: 2, UNSUPPORTED: 6, NOT_FOUND: 8 };
const lanesMask = async (s) => {
  const r = await call(s, 3, new Uint8Array(0));
  return new DataView(r.body.buffer, r.body.byteOffset).getBigUint64(8, true);
};

// Without the module: the version-1 ops only.
{
  const s = new Session(null, '', '', null);
  await hello(s);
  check((await lanesMask(s)) === 0xffn, 'a page without weft.wasm offers ops 0..7');
  const x = await create(s, [4]);
  const y = await create(s, [4]);
  const r = await op(s, 12, [[x, [4]]], [[y, [4]]]);
  check(r.st === S.UNSUPPORTED, `gelu without weft.wasm is unsupported (${r.st} ${r.text})`);
}

const wasm = await loadWasm(fs.readFileSync(path.join(web, 'wasm', 'weft.wasm')));
check(!!wasm, 'weft.wasm loads');
const s = new Session(null, '', '', wasm);
await hello(s);
check((await lanesMask(s)) === 0x1ffffffn, 'with weft.wasm the page offers ops 0..24');

// gelu: right, then a view larger than its tensor, then an output too small for the input.
const x = await create(s, [8]);
const y = await create(s, [8]);
const small = await create(s, [4]);
await write(s, x, [-0, 1e-40, -1e-40, 0, 1, -1, 20, -20]);
let r = await op(s, 12, [[x, [8]]], [[y, [8]]]);
check(r.st === S.OK, `gelu runs (${r.text})`);
const g = await read(s, y, 8);
check(Object.is(g[0], -0) || g[0] === 0, 'gelu(-0) is a zero');
check(g[4] > 0.84 && g[4] < 0.85 && g[6] === 20 && g[7] === -0, `gelu values (${Array.from(g)})`);
r = await op(s, 12, [[x, [8]]], [[small, [8]]]);
check(r.st === S.SHAPE, `a view past its tensor is refused (${r.st} ${r.text})`);
r = await op(s, 12, [[x, [8]]], [[small, []]]);
check(r.st === S.SHAPE, `an output smaller than the op is refused (${r.st} ${r.text})`);

// crossentropy: targets must be i32 (RETYPE makes them so); out of range is refused with nothing written.
const logits = await create(s, [2, 3]);
const tgt = await create(s, [2]);
const loss = await create(s, [2]);
await write(s, logits, [1, 2, 3, 0, 0, 0]);
await writeI32(s, tgt, [2, 0]);
await write(s, loss, [7, 7]);
r = await op(s, 18, [[logits, [2, 3]], [tgt, [2]]], [[loss, [2]]]);
check(r.st === S.INVALID_ARGUMENT && /i32/.test(r.text), `f32 targets are refused (${r.st} ${r.text})`);
await retype(s, tgt, 1);
r = await op(s, 18, [[logits, [2, 3]], [tgt, [2]]], [[loss, [2]]]);
check(r.st === S.OK, `crossentropy runs once the targets are i32 (${r.text})`);
const l = await read(s, loss, 2);
check(Math.abs(l[0] - 0.4076) < 1e-3 && Math.abs(l[1] - Math.log(3)) < 1e-5, `crossentropy losses (${Array.from(l)})`);
await write(s, loss, [7, 7]);
await writeI32(s, tgt, [2, 3]);
r = await op(s, 18, [[logits, [2, 3]], [tgt, [2]]], [[loss, [2]]]);
check(r.st === S.INVALID_ARGUMENT, `a target out of range is refused (${r.st} ${r.text})`);
check(Array.from(await read(s, loss, 2)).every((v) => v === 7), 'and nothing is written');

// permute: an axis out of range; copy_slice: a slice past its destination.
const p4 = await create(s, [2, 3]);
const p5 = await create(s, [3, 2]);
r = await op(s, 22, [[p4, [2, 3]]], [[p5, [3, 2]]], [1, 2]);
check(r.st === S.INVALID_ARGUMENT, `a permutation with axis 2 of rank 2 is refused (${r.st} ${r.text})`);
r = await op(s, 22, [[p4, [2, 3]]], [[p5, [3, 2]]], [1, 0]);
check(r.st === S.OK, `a transpose runs (${r.text})`);
const src = await create(s, [1, 3, 1, 2]);
const dst = await create(s, [1, 4, 1, 2]);
r = await op(s, 23, [[src, [1, 3, 1, 2]]], [[dst, [1, 4, 1, 2]]], [1, 2]);
check(r.st === S.SHAPE, `a slice past its destination is refused (${r.st} ${r.text})`);
r = await op(s, 23, [[src, [1, 3, 1, 2]]], [[dst, [1, 4, 1, 2]]], [1, 1]);
check(r.st === S.OK, `a slice that fits runs (${r.text})`);
// attention: heads that do not divide C; a missing required output.
const qkv = await create(s, [1, 2, 12]);
const ao = await create(s, [1, 2, 4]);
const att = await create(s, [1, 3, 2, 2]);
r = await op(s, 14, [[qkv, [1, 2, 12]]], [[ao, [1, 2, 4]], [att, [1, 3, 2, 2]]], [3]);
check(r.st === S.SHAPE, `3 heads of C = 4 are refused (${r.st} ${r.text})`);
r = await op(s, 14, [[qkv, [1, 2, 12]]], [[ao, [1, 2, 4]], [0n, []]], [2]);
check(r.st === S.INVALID_ARGUMENT, `attention without att is refused (${r.st} ${r.text})`);

// attention_cached: query positions past the cache, heads that do not divide C, an att of the wrong shape;
// then one that fits, without att (the kernel's own row of scratch), against the fused attention's rows.
const cache = await create(s, [1, 3, 12]);
const co = await create(s, [1, 2, 4]);
const catt = await create(s, [1, 2, 2, 3]);
const cells = Array.from({ length: 36 }, (_, i) => ((i * 7) % 11) / 4 - 1.25);
await write(s, cache, cells);
r = await op(s, 24, [[cache, [1, 3, 12]]], [[co, [1, 2, 4]], [catt, [1, 2, 2, 3]]], [2, 2]);
check(r.st === S.SHAPE, `attention_cached with t0 + Tq past the cache is refused (${r.st} ${r.text})`);
r = await op(s, 24, [[cache, [1, 3, 12]]], [[co, [1, 2, 4]], [0n, []]], [3, 1]);
check(r.st === S.SHAPE, `attention_cached with 3 heads of C = 4 is refused (${r.st} ${r.text})`);
r = await op(s, 24, [[cache, [1, 3, 12]]], [[co, [1, 2, 4]], [catt, [1, 2, 3, 2]]], [2, 1]);
check(r.st === S.SHAPE, `attention_cached with att [1,2,3,2] is refused (${r.st} ${r.text})`);
r = await op(s, 24, [[cache, [1, 3, 12]]], [[co, [1, 2, 4]], [0n, []]], [2, 1]);
check(r.st === S.OK, `attention_cached over the cache runs (${r.text})`);
const cached = await read(s, co, 8);
const full = await create(s, [1, 3, 4]);
const fatt = await create(s, [1, 2, 3, 3]);
r = await op(s, 14, [[cache, [1, 3, 12]]], [[full, [1, 3, 4]], [fatt, [1, 2, 3, 3]]], [2]);
check(r.st === S.OK, `attention over the same cache runs (${r.text})`);
const rows = await read(s, full, 12);
const bits = (a) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));
check(bits(cached).join() === bits(rows.subarray(4)).join(), 'attention_cached rows 1..2 are the fused attention\'s bits');

console.log(`worker_wasm: ${checks} checks, ${failures} failed`);
process.exit(failures ? 1 : 0);
