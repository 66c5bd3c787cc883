#!/usr/bin/python3
"""eval_onnx.py - load an ONNX file that Flotilla trained and exported back
into its PyTorch module, and print the Fashion-MNIST test accuracy.

The file is checked with onnx.checker, then every initializer is copied by
name into the module's state_dict (Flotilla keeps the names it imported,
batch-norm running statistics included), and the module runs in eval mode
on the test split of fmnist_to_npy.py's files, scaled as the job feeds them.

    /usr/bin/python3 deploy/examples/onnx/eval_onnx.py {resnet|vit} MODEL.onnx [DATA_DIR]

Prints `test acc1: 0.xxxx` (and exits 1 if the file is refused).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist_onnx  # noqa: E402
import resnet_fmnist  # noqa: E402
import vit_fmnist  # noqa: E402

MODELS = {"resnet": resnet_fmnist.build, "vit": vit_fmnist.build}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("onnx")
    ap.add_argument("data_dir", nargs="?", default="/tmp/flotilla-fmnist")
    ap.add_argument("--limit", type=int, default=0, help="evaluate the first N test samples")
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    m = MODELS[a.model]()
    names = fmnist_onnx.load_onnx_into(m, a.onnx)
    xt, yt = fmnist_onnx.load_split(a.data_dir, "test", a.limit)
    acc = fmnist_onnx.accuracy(m, xt, yt)
    print(f"{a.onnx}: onnx.checker ok, {len(names)} initializers loaded into {a.model}")
    print(f"test acc1: {acc:.4f} ({len(xt)} samples)")


if __name__ == "__main__":
    main()
