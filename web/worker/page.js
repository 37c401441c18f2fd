// page.js - the worker page's own script: finds the fabric (the server that served this page, or
// ?server=host:port), the fabric's token (the address's #token=..., as `weft serve` prints it) and the
// shared secret (#...&secret=..., or the field); browsers never send the part after #. The token goes into
// the WebSocket's URL (?token=...), which the fabric checks before it takes the tab. It starts worker.js in a dedicated Worker (on the page itself where module workers are missing), and
// shows its status. window.weftWorker holds the latest status for test drivers.

const q = new URLSearchParams(location.search);
const hash = () => new URLSearchParams(location.hash.replace(/^#/, ''));
const token = hash().get('token') || '';
const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${q.get('server') || location.host}/weft` +
  `?token=${encodeURIComponent(token)}`;
const field = document.getElementById('secret');
const secret = () => hash().get('secret') || field.value || '';

window.weftWorker = { state: 'starting', ops: 0, device: '', server: url, closeReason: '', error: '' };

function show(st) {
  window.weftWorker = st;
  const text = { state: st.state, device: st.device, server: st.server, ops: String(st.ops),
    why: st.error || st.closeReason };
  for (const [id, value] of Object.entries(text)) document.getElementById(id).textContent = value;
}

async function onPage(why) {
  show({ ...window.weftWorker, state: 'starting on the page', error: why });
  const m = await import('./worker.js');
  m.startWorker({ url, secret, onStatus: show });
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
  worker.postMessage({ url, secret: secret() });
  field.addEventListener('input', () => worker.postMessage({ secret: secret() }));
  addEventListener('hashchange', () => worker.postMessage({ secret: secret() }));
}
