"""One fabric shared by threads: each call holds the fabric's lock, calls that wait let other threads run, and
every result is right."""

import threading

import numpy as np

import reference as ref

f32 = np.float32


def test_threads_share_a_fabric(fabric):
    rng = np.random.default_rng(40)
    big = rng.uniform(-1, 1, (160, 160)).astype(f32)  # large enough to run with the interpreter released
    small = rng.uniform(-1, 1, (4, 4)).astype(f32)
    want_big, want_small = ref.matmul(big, big), ref.matmul(small, small)
    t = fabric.tensor(small)
    errors = []

    def work(i):
        try:
            for _ in range(5):
                if not ref.same_bits(fabric.matmul(big, big), want_big):
                    errors.append(f"thread {i}: big matmul differs")
                for _ in range(20):
                    if not ref.same_bits(np.asarray(t @ t), want_small):
                        errors.append(f"thread {i}: small matmul differs")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(f"thread {i}: {e!r}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
