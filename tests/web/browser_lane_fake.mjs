// browser_lane_fake.mjs - a scripted tab for browser_lane.c: connects to a fabric's WebSocket like the worker
// page, then answers the wire protocol in one of a few ways, most of them wrong, so the test can check that
// the fabric validates what a tab sends and drops it rather than trusting it. Needs Node's WebSocket client
// (node --experimental-websocket on Node 20-21; built in from 22).
//
//   node --experimental-websocket browser_lane_fake.mjs --ws ws://127.0.0.1:PORT/weft?token=T --mode MODE
//        [--origin ORIGIN (default: http://HOST:PORT of --ws, a page of that server; "none" sends none)]
//   prints "open" once connected and "closed CODE REASON" when the fabric closes it, then exits 0.
//
// Modes: good (a well-formed worker that computes with the worker page's own JavaScript, worker.js, so it
// passes the fabric's self-test at join), wrong-id, huge-length, short-hello, text, unsolicited, silent,
// oversize, bad-lanes, no-proof, bad-read (good, but a READ of exactly 4 floats is answered with the wrong
// count), wrong-bit (good, but every READ answers its first float one bit off), no-exact (good, but its lane
// honours fp32 only), wrong-v2 (good, but once a version-2 op has run every READ answers its first float one
// bit off). Where WEFT_BROWSER_WEB names a folder with wasm/weft.wasm, the good tabs load it as the worker
// page does and offer every op (else the version-1 ops).
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
};
const url = arg('ws', '');
const mode = arg('mode', 'good');
const say = (line) => process.stdout.write(`${line}\n`);
const wsUrl = url ? new URL(url) : null;
const origin = arg('origin', wsUrl ? `http://${wsUrl.host}` : '');
if (typeof WebSocket === 'undefined') {
  say('SKIP this Node has no WebSocket client (run it with --experimental-websocket, or Node >= 22)');
  process.exit(77);
}

const MAGIC = 0x54464557;
function frame(type, id, status, payload, claimed) {
  const out = new Uint8Array(16 + payload.length);
  const o = new DataView(out.buffer);
  o.setUint32(0, MAGIC, true);
  o.setUint16(4, type | 0x8000, true);
  o.setUint16(6, status, true);
  o.setUint32(8, id, true);
  o.setUint32(12, claimed ?? payload.length, true);
  out.set(payload, 16);
  return out;
}

function helloReply() {
  const p = new Uint8Array(56);
  const o = new DataView(p.buffer);
  o.setUint32(0, 2, true); // protocol 2
  o.setUint32(4, 1, true);
  o.setUint32(44, 1 << 20, true);
  o.setBigUint64(48, 1n << 30n, true);
  return p;
}

function lanesReply(count) {
  const name = new TextEncoder().encode('fake');
  const p = new Uint8Array(4 + 4 + 8 + 3 * (2 + name.length));
  const o = new DataView(p.buffer);
  o.setUint32(0, count, true);
  o.setUint32(4, 1, true);
  o.setBigUint64(8, 0xffn, true); // the version-1 ops
  let at = 16;
  for (let k = 0; k < 3; k++) {
    o.setUint16(at, name.length, true);
    p.set(name, at + 2);
    at += 2 + name.length;
  }
  return p;
}

let nextHandle = 1n;
const { Session, answer, loadWasm } = await import('../../web/worker/worker.js');
{
  const fs = await import('node:fs');
  const wasmPath = process.env.WEFT_BROWSER_WEB ? `${process.env.WEFT_BROWSER_WEB}/wasm/weft.wasm` : '';
  if (wasmPath && fs.existsSync(wasmPath)) await loadWasm(fs.readFileSync(wasmPath));
}
const session = new Session(null, '', wsUrl ? wsUrl.host : '');
let sawV2 = false;
const ws = new WebSocket(url, origin === 'none' ? { protocols: 'weft' } : { protocols: 'weft', headers: { Origin: origin } });
ws.binaryType = 'arraybuffer';
ws.onopen = () => {
  say('open');
  if (mode === 'unsolicited') ws.send(frame(1, 1, 0, helloReply()));
};
ws.onclose = (ev) => {
  say(`closed ${ev.code} ${ev.reason}`);
  process.exit(0);
};
ws.onerror = () => {};
let chain = Promise.resolve();
ws.onmessage = (ev) => {
  const h = new DataView(ev.data);
  const type = h.getUint16(4, true);
  const id = h.getUint32(8, true);
  const p = new Uint8Array(ev.data, 16);
  const reply = (payload, status = 0) => ws.send(frame(type, id, status, payload));
  if (mode === 'silent') return;
  if (mode === 'good' || mode === 'bad-read' || mode === 'wrong-bit' || mode === 'no-exact' || mode === 'wrong-v2') {
    // In order, one at a time, as the worker page answers.
    chain = chain.then(async () => {
      if (mode === 'bad-read' && type === 6 && new DataView(p.buffer, 16).getBigUint64(16, true) === 4n) {
        const out = new Uint8Array(8 + 16);
        new DataView(out.buffer).setBigUint64(0, 5n, true);
        return reply(out);
      }
      if (type === 8 && p.length >= 4 && new DataView(p.buffer, 16).getUint32(0, true) >= 8) sawV2 = true;
      const [r] = await answer(session, ev.data);
      if (!r) return;
      if (mode === 'wrong-v2' && sawV2 && type === 6 && r.length >= 28 && new DataView(r.buffer).getUint16(6, true) === 0) r[24] ^= 1;
      if (mode === 'wrong-bit' && type === 6 && r.length >= 28 && new DataView(r.buffer).getUint16(6, true) === 0) r[24] ^= 1;
      if (mode === 'no-exact' && type === 3) new DataView(r.buffer).setUint32(20, 2, true);
      ws.send(r);
    });
    return;
  }
  if (type === 1) {
    if (mode === 'wrong-id') return ws.send(frame(type, id + 1, 0, helloReply()));
    if (mode === 'huge-length') return ws.send(frame(type, id, 0, helloReply(), 0xfffffff0));
    if (mode === 'short-hello') return reply(new Uint8Array(10));
    if (mode === 'text') return ws.send('hello');
    if (mode === 'oversize') return reply(new Uint8Array(3 << 20));
    return reply(helloReply());
  }
  if (type === 9) {
    if (mode === 'no-proof') return reply(new TextEncoder().encode('no secret here'), 1);
    return reply(new Uint8Array(32)); // a wrong proof
  }
  if (type === 3) return reply(mode === 'bad-lanes' ? lanesReply(1000) : lanesReply(1));
  if (type === 4) {
    const out = new Uint8Array(8);
    new DataView(out.buffer).setBigUint64(0, nextHandle++, true);
    return reply(out);
  }
  if (type === 6) {
    const count = Number(new DataView(p.buffer, 16).getBigUint64(16, true));
    const out = new Uint8Array(8 + count * 4);
    new DataView(out.buffer).setBigUint64(0, BigInt(mode === 'bad-read' ? count + 1 : count), true);
    return reply(out);
  }
  if (type === 8) return reply(new Uint8Array(4));
  return reply(new Uint8Array(0));
};
