// page.js - the worker page's own script: finds the fabric (the server that served this page, or
// ?server=host:port), the fabric's token (the address's #token=..., as `weft serve` prints it) and the
// shared secret (#...&secret=..., or the field); browsers never send the part after #. The token goes into
// the WebSocket's URL (?token=...), which the fabric checks before it takes the tab. It starts worker.js in a
// dedicated Worker (on the page itself where module workers are missing), and shows its status: the ops run,
// per op on which lane (the CPU: JavaScript and weft.wasm; the GPU: WebGPU). #gpu_min=N sets the work (in
// elements) from which the tab runs an op it has a WebGPU kernel for on its GPU when the fabric lets it
// choose. window.weftWorker holds the latest status for test drivers.

const q = new URLSearchParams(location.search);
const hash = () => new URLSearchParams(location.hash.replace(/^#/, ''));
const token = hash().get('token') || '';
const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${q.get('server') || location.host}/weft` +
  `?token=${encodeURIComponent(token)}`;
const field = document.getElementById('secret');
const secret = () => hash().get('secret') || field.value || '';
const gpuMin = hash().has('gpu_min') ? Number(hash().get('gpu_min')) : undefined;

window.weftWorker = { state: 'starting', ops: 0, ran: {}, device: '', server: url, closeReason: '', error: '' };

// "12: 8 on WebGPU (matmul 5, gelu 3), 4 on the CPU (layernorm 4)"
function ranText(st) {
  const part = (lane, what) => {
    const ops = Object.entries(st.ran || {}).filter(([, n]) => n[lane]);
    const total = ops.reduce((s, [, n]) => s + n[lane], 0);
    return total ? `${total} on ${what} (${ops.map(([op, n]) => `${op} ${n[lane]}`).join(', ')})` : '';
  };
  const parts = [part(1, 'WebGPU'), part(0, 'the CPU')].filter((x) => x);
  return `${st.ops}${parts.length ? `: ${parts.join(', ')}` : ''}`;
}

function show(st) {
  window.weftWorker = st;
  const text = { state: st.state, device: st.device, server: st.server, ops: ranText(st),
    why: st.error || st.closeReason };
  for (const [id, value] of Object.entries(text)) document.getElementById(id).textContent = value;
}

async function onPage(why) {
  show({ ...window.weftWorker, state: 'starting on the page', error: why });
  const m = await import('./worker.js');
  m.startWorker({ url, secret, gpuMin, onStatus: show });
}

let worker = null;
try {
  worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
} catch (e) {
  onPage(`no module workers here (${e.message}): running on the page`);
}
if (worker) {
  worker.onmessage = (ev) => show(ev.data);
  worker.onerror = (ev) => {
    ev.preventDefault();
    worker.terminate();
    onPage(`the worker thread failed (${ev.message || 'no message'}): running on the page`);
  };
  worker.postMessage({ url, secret: secret(), gpuMin });
  field.addEventListener('input', () => worker.postMessage({ secret: secret() }));
  addEventListener('hashchange', () => worker.postMessage({ secret: secret() }));
}
