#!/usr/bin/env python3
"""corpus_seeds.py - writes the protocol-2 seeds of the fuzzer's corpus (tests/net/corpus) that exercise the
transformer ops (and one that asks for streams): each a whole client session as a byte stream (hello, creates of f32 and i32 tensors, writes,
an op of the table with its operands, views and parameters, reads), so the fuzzer starts from frames that
reach the op table's validators and kernels. Run it from the repository root after changing the frames."""
import os
import struct

MAGIC = 0x54464557
HELLO, LANES, CREATE, WRITE, READ, FREE, OP, RETYPE, STREAMS, JOIN = 1, 3, 4, 5, 6, 7, 8, 12, 13, 14
F32, I32 = 0, 1


class Stream:
    def __init__(self):
        self.b = b''
        self.id = 0
        self.handles = 0

    def frame(self, typ, payload):
        self.id += 1
        self.b += struct.pack('<IHHII', MAGIC, typ, 0, self.id, len(payload)) + payload

    def hello(self):
        self.frame(HELLO, struct.pack('<II', 2, 1))

    def create(self, dtype, dims, data):
        self.frame(CREATE, struct.pack('<II', dtype, len(dims)) + b''.join(struct.pack('<q', d) for d in dims))
        self.handles += 1
        h = self.handles
        fmt = '<%d%s' % (len(data), 'i' if dtype == I32 else 'f')
        self.frame(WRITE, struct.pack('<QQQ', h, 0, len(data)) + struct.pack(fmt, *data))
        return h

    def op(self, kind, ins, outs, ip=(), fp=()):
        """ins, outs: lists of (handle, dims or None)."""
        p = struct.pack('<IIiIBBH', kind, 0, -1, 0, len(ins), len(outs), 0)
        for h, dims in list(ins) + list(outs):
            dims = dims or []
            p += struct.pack('<QI', h, len(dims)) + b''.join(struct.pack('<q', d) for d in dims)
            p += b'\0' * (8 * (4 - len(dims)))
        p += struct.pack('<8q', *(list(ip) + [0] * (8 - len(ip))))
        p += struct.pack('<8f', *(list(fp) + [0.0] * (8 - len(fp))))
        self.frame(OP, p)

    def read(self, h, n):
        self.frame(READ, struct.pack('<QQQ', h, 0, n))


def floats(n, k=1):
    return [((i * 37 + k) % 17 - 8) * 0.125 for i in range(n)]


def seeds():
    out = {}
    s = Stream()  # embedding: i32 tokens and positions
    s.hello()
    tok = s.create(I32, [2, 3], [0, 4, 2, 1, 3, 4])
    pos = s.create(I32, [2, 3], [0, 1, 2, 0, 1, 2])
    wte = s.create(F32, [5, 4], floats(20))
    wpe = s.create(F32, [3, 4], floats(12, 3))
    y = s.create(F32, [2, 3, 4], [0.0] * 24)
    s.op(8, [(tok, None), (pos, None), (wte, None), (wpe, None)], [(y, None)])
    s.read(y, 24)
    out['v2_embedding'] = s.b
    s = Stream()  # layernorm: three outputs, eps
    s.hello()
    x = s.create(F32, [3, 4], floats(12))
    g = s.create(F32, [4], floats(4, 5))
    be = s.create(F32, [4], floats(4, 7))
    yy = s.create(F32, [3, 4], [0.0] * 12)
    mean = s.create(F32, [3], [0.0] * 3)
    rstd = s.create(F32, [3], [0.0] * 3)
    s.op(10, [(x, None), (g, None), (be, None)], [(yy, None), (mean, None), (rstd, None)], fp=[1e-5])
    s.read(rstd, 3)
    out['v2_layernorm'] = s.b
    s = Stream()  # adamw: three outputs read and written
    s.hello()
    grad = s.create(F32, [8], floats(8))
    prm = s.create(F32, [8], floats(8, 2))
    m = s.create(F32, [8], [0.0] * 8)
    v = s.create(F32, [8], [0.0] * 8)
    s.op(20, [(grad, None)], [(prm, None), (m, None), (v, None)], fp=[1e-3, 0.9, 0.999, 1e-8, 0.01, 0.1, 0.001])
    s.read(prm, 8)
    out['v2_adamw'] = s.b
    s = Stream()  # crossentropy on a handle retyped to i32; a permute through views
    s.hello()
    logits = s.create(F32, [4, 5], floats(20))
    t = s.create(F32, [4], [0.0] * 4)
    s.frame(RETYPE, struct.pack('<QI', t, I32))
    s.frame(WRITE, struct.pack('<QQQ', t, 0, 4) + struct.pack('<4i', 0, 4, 2, 1))
    losses = s.create(F32, [4], [0.0] * 4)
    s.op(18, [(logits, None), (t, None)], [(losses, None)])
    py = s.create(F32, [20], [0.0] * 20)
    s.op(22, [(logits, [2, 2, 5])], [(py, [2, 2, 5])], ip=[1, 0, 2])
    s.read(py, 20)
    out['v2_retype_permute'] = s.b

    s = Stream()  # streams granted (registered, then unregistered when the session ends), a join refused
    s.frame(HELLO, struct.pack('<II', 2, 4))
    s.frame(STREAMS, struct.pack('<I', 4))
    s.frame(JOIN, struct.pack('<QI', 1, 1) + bytes(32))
    s.frame(STREAMS, struct.pack('<I', 3))
    x = s.create(F32, [6], floats(6))
    s.read(x, 6)
    if len(s.b) % 2:  # even: the fuzz target's worker without a secret
        s.frame(LANES, b'')
    out['streams'] = s.b
    return out


if __name__ == '__main__':
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus')
    for name, data in seeds().items():
        with open(os.path.join(here, name), 'wb') as f:
            f.write(data)
