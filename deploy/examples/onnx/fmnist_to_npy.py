#!/usr/bin/python3
"""fmnist_to_npy.py - Fashion-MNIST as a Python user keeps it: .npy files.

Reads the IDX files of Debian's dataset-fashion-mnist package
(/usr/share/datasets/fashion-mnist) and writes, with numpy.save,

  OUTDIR/train_x.npy  uint8  (60000, 1, 28, 28)   pixels 0..255
  OUTDIR/train_y.npy  int64  (60000,)             class ids 0..9
  OUTDIR/test_x.npy   uint8  (10000, 1, 28, 28)
  OUTDIR/test_y.npy   int64  (10000,)

which the example jobs read with `data.format: npy` (Flotilla scales uint8
features by data.scale, 1/255 by default, as torchvision's ToTensor does).

    /usr/bin/python3 deploy/examples/onnx/fmnist_to_npy.py [OUTDIR] [--limit N]

OUTDIR defaults to /tmp/flotilla-fmnist; --limit keeps the first N samples
of each split (for quick tests).
"""
import argparse
import gzip
import os
import struct

import numpy as np

SRC = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xff
    if magic >> 8 != 0x08 or ndim not in (1, 3):
        raise SystemExit(f"{path}: not an IDX file of unsigned bytes (magic {magic:#010x})")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    a = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if a.size != int(np.prod(dims)):
        raise SystemExit(f"{path}: {a.size} bytes of data, dims {dims} need {int(np.prod(dims))}")
    return a.reshape(dims)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", nargs="?", default="/tmp/flotilla-fmnist")
    ap.add_argument("--src", default=SRC, help="directory of the IDX .gz files")
    ap.add_argument("--limit", type=int, default=0, help="keep the first N samples of each split")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = read_idx(os.path.join(a.src, f"{prefix}-images-idx3-ubyte.gz"))
        y = read_idx(os.path.join(a.src, f"{prefix}-labels-idx1-ubyte.gz"))
        if a.limit > 0:
            x, y = x[:a.limit], y[:a.limit]
        np.save(os.path.join(a.outdir, f"{split}_x.npy"), np.ascontiguousarray(x[:, None, :, :]))
        np.save(os.path.join(a.outdir, f"{split}_y.npy"), y.astype(np.int64))
        print(f"{a.outdir}/{split}_x.npy: uint8 {(len(x), 1) + x.shape[1:]}, "
              f"{split}_y.npy: int64 ({len(y)},)")


if __name__ == "__main__":
    main()
