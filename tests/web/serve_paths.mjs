// serve_paths.mjs - what `weft serve` gives a browser over plain HTTP, without a browser: an index at / that
// links the Bench page and the worker page; the Bench page at /bench/ and at /bench (no slash) with its
// scripts found either way; the cross-origin isolation headers the page needs for a fine clock; and, for a
// port already taken, one clear line and exit status 1 with no libwebsockets log lines.
//
//   node serve_paths.mjs --weft <path to weft> --web <build>/web
import { spawn } from 'node:child_process';
import http from 'node:http';

function arg(name) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : '';
}
const weft = arg('weft');
const web = arg('web');
const failures = [];
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'}  ${what}`);
  if (!ok) failures.push(what);
}

function get(base, path) {
  return new Promise((resolve, reject) => {
    http.get(new URL(path, base), (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    }).on('error', reject);
  });
}

// Starts `weft serve`; resolves with the process and what it printed once it says where it listens (or exits).
function serve(port) {
  return new Promise((resolve) => {
    const p = spawn(weft, ['serve', '--port', String(port), '--web', web, '--slots', '1'],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    const out = { stdout: '', stderr: '', code: null, proc: p };
    const deadline = setTimeout(() => resolve(out), 20000);
    p.stdout.on('data', (d) => {
      out.stdout += d;
      const m = /listening on (http:\/\/[^\s]+)/.exec(out.stdout);
      if (m) {
        out.base = m[1].endsWith('/') ? m[1] : `${m[1]}/`;
        clearTimeout(deadline);
        resolve(out);
      }
    });
    p.stderr.on('data', (d) => { out.stderr += d; });
    p.on('exit', (code) => { out.code = code; clearTimeout(deadline); resolve(out); });
  });
}

const first = await serve(0);
check(Boolean(first.base), `weft serve says where it listens (${first.base || first.stdout + first.stderr})`);
if (first.base) {
  try {
    const index = await get(first.base, '/');
    check(index.status === 200, `/ answers 200 (got ${index.status})`);
    check(/href="\/bench\/"/.test(index.body) && /href="\/worker\/"/.test(index.body),
      '/ is an index linking the Bench page and the worker page');
    for (const path of ['/bench/', '/bench']) {
      const page = await get(first.base, path);
      check(page.status === 200 && /<script type="module" src="bench.js">/.test(page.body), `${path} serves the Bench page (${page.status})`);
      check(/<base href="\/bench\/">/.test(page.body), `${path}: its relative addresses resolve under /bench/ (a <base>)`);
      check(page.headers['cross-origin-opener-policy'] === 'same-origin', `${path}: Cross-Origin-Opener-Policy same-origin (${page.headers['cross-origin-opener-policy']})`);
      check(page.headers['cross-origin-embedder-policy'] === 'require-corp', `${path}: Cross-Origin-Embedder-Policy require-corp (${page.headers['cross-origin-embedder-policy']})`);
    }
    // what /bench's scripts resolve to, under its <base>
    for (const path of ['/bench/bench.js', '/bench/style.css', '/gpu/gpu.js', '/wasm/weft.wasm']) {
      const r = await get(first.base, path);
      check(r.status === 200, `${path} is there (${r.status})`);
    }
    const worker = await get(first.base, '/worker');
    check(worker.status === 200 && /<base href="\/worker\/">/.test(worker.body), `/worker (no slash) serves the worker page with its <base> (${worker.status})`);

    // the same port again: taken
    const port = new URL(first.base).port;
    const second = await serve(port);
    if (second.code === null) second.proc.kill();
    check(second.code === 1, `a second weft serve on port ${port} exits 1 (got ${second.code})`);
    check(/in use/.test(second.stderr), `it says the port is in use: ${second.stderr.trim()}`);
    check(!/^\[\d{4}\/|ERROR on binding|lws_/m.test(second.stderr), 'no libwebsockets log lines on stderr');
  } finally {
    first.proc.kill('SIGINT');
  }
} else {
  first.proc.kill();
}
if (failures.length) {
  console.log(`\n${failures.length} check(s) failed`);
  process.exit(1);
}
console.log('\nall checks passed');
