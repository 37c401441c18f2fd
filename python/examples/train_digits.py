#!/usr/bin/env python3
"""Trains a 64-32-10 MLP (relu, softmax cross-entropy, plain SGD) on scikit-learn's handwritten digits with
every op run by weft: forward, backward and the weight updates. The parameters stay resident on whichever
lane the router picks, each step is one scope, and only the loss comes back to the host during training.

The digits (1797 images of 8x8 pixels) ship inside scikit-learn (Debian: python3-sklearn); nothing is
downloaded. Under the exact contract the run is bit-for-bit the same on every lane and every machine.

    PYTHONPATH=python python3 python/examples/train_digits.py [--epochs 30] [--lanes cpu] [--lr 0.1]
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import weft  # noqa: E402


def load_digits(seed):
    try:
        from sklearn.datasets import load_digits as sk_load_digits
    except ImportError:
        sys.exit("train_digits: needs scikit-learn for the digits data (Debian: apt-get install python3-sklearn)")
    d = sk_load_digits()
    x = (d.data / 16.0).astype(np.float32)  # pixels are 0..16
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = len(x) // 5
    return x[n_test:], y[n_test:], x[:n_test], y[:n_test]


def one_hot(labels, classes=10):
    return np.eye(classes, dtype=np.float32)[labels]


class MLP:
    """Two layers on one fabric. Every buffer is a weft.Tensor created once; each op writes into an out=."""

    def __init__(self, fabric, batch, hidden, seed, contract):
        self.f, self.batch, self.contract = fabric, batch, contract
        rng = np.random.default_rng(seed)
        he = lambda fan_in, shape: (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)  # noqa
        f = fabric
        self.w1, self.b1 = f.tensor(he(64, (64, hidden))), f.zeros(hidden)
        self.w2, self.b2 = f.tensor(he(hidden, (hidden, 10))), f.zeros(10)
        self.x, self.t = f.zeros((batch, 64)), f.zeros((batch, 10))
        self.z1, self.h1, self.z2 = f.zeros((batch, hidden)), f.zeros((batch, hidden)), f.zeros((batch, 10))
        self.loss, self.dz2 = f.zeros(1), f.zeros((batch, 10))
        self.dw2, self.db2 = f.zeros((hidden, 10)), f.zeros(10)
        self.dh1, self.dw1, self.db1 = f.zeros((batch, hidden)), f.zeros((64, hidden)), f.zeros(hidden)

    def forward(self, x, z1, h1, z2):
        f, c = self.f, self.contract
        f.matmul(x, self.w1, contract=c, out=z1)
        f.add(z1, self.b1, contract=c, out=z1)      # bias broadcast over the rows
        f.relu(z1, contract=c, out=h1)
        f.matmul(h1, self.w2, contract=c, out=z2)
        f.add(z2, self.b2, contract=c, out=z2)
        return z2

    def step(self, xb, tb, lr):
        f, c = self.f, self.contract
        self.x.write(xb)
        self.t.write(tb)
        with f.scope():
            self.forward(self.x, self.z1, self.h1, self.z2)
            f.softmax_xent(self.z2, self.t, contract=c, out_loss=self.loss, out_grad=self.dz2)
            f.matmul(self.h1, self.dz2, contract=c, trans_a=True, out=self.dw2)   # h1^T . dz2
            f.sum_rows(self.dz2, contract=c, out=self.db2)
            f.matmul(self.dz2, self.w2, contract=c, trans_b=True, out=self.dh1)   # dz2 . w2^T
            f.relu_backward(self.dh1, self.z1, contract=c, out=self.dh1)
            f.matmul(self.x, self.dh1, contract=c, trans_a=True, out=self.dw1)    # x^T . dh1
            f.sum_rows(self.dh1, contract=c, out=self.db1)
            for p, g in ((self.w1, self.dw1), (self.b1, self.db1), (self.w2, self.dw2), (self.b2, self.db2)):
                f.axpy(-lr, g, p, contract=c)
        return float(self.loss.numpy()[0])

    def predict(self, x):
        f = self.f
        n = len(x)
        hidden = self.w1.shape[1]
        z1, h1, z2 = f.zeros((n, hidden)), f.zeros((n, hidden)), f.zeros((n, 10))
        logits = self.forward(f.tensor(x), z1, h1, z2).numpy()
        return logits.argmax(axis=1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lanes", default=None, help="lane kinds or names to open (default: every lane found)")
    p.add_argument("--contract", default="exact", choices=["exact", "fp32"])
    p.add_argument("--calibration", default="auto", choices=["auto", "force", "off"])
    args = p.parse_args(argv)

    x_train, y_train, x_test, y_test = load_digits(args.seed)
    with weft.Fabric(lanes=args.lanes, calibration=args.calibration) as fabric:
        print(f"weft {weft.library_version}: lanes {', '.join(fabric.lanes)}; {len(x_train)} training and "
              f"{len(x_test)} test digits; 64-{args.hidden}-10 MLP, batch {args.batch}, lr {args.lr}, "
              f"contract {args.contract}")
        model = MLP(fabric, args.batch, args.hidden, args.seed, args.contract)
        rng = np.random.default_rng(args.seed + 1)
        steps = len(x_train) // args.batch  # full batches only: the tensors have one shape
        t_train = one_hot(y_train)
        start = time.perf_counter()
        losses = []
        for epoch in range(1, args.epochs + 1):
            order = rng.permutation(len(x_train))
            total = 0.0
            for s in range(steps):
                idx = order[s * args.batch:(s + 1) * args.batch]
                total += model.step(x_train[idx], t_train[idx], args.lr)
            losses.append(total / steps)
            train_acc = float(np.mean(model.predict(x_train) == y_train))
            print(f"epoch {epoch:3d}  loss {total / steps:.4f}  train accuracy {train_acc:.4f}  "
                  f"(last op on {fabric.last_lane})")
        elapsed = time.perf_counter() - start
        test_acc = float(np.mean(model.predict(x_test) == y_test))
        print(f"test accuracy {test_acc:.4f} on {len(x_test)} held-out digits "
              f"({elapsed:.2f} s, {args.epochs * steps} steps, {elapsed / max(1, args.epochs * steps) * 1e3:.2f} ms a step)")
        weights = [t.numpy() for t in (model.w1, model.b1, model.w2, model.b2)]
    return {"test_accuracy": test_acc, "epoch_losses": losses, "weights": weights}


if __name__ == "__main__":
    main()
