#!/usr/bin/python3
"""eval_export.py - a recsys example's trained export (train.export_onnx:
the ONNX model and, with pserver.sparse_tables, the tables' .ids/.rows.npy
beside it) loaded into its PyTorch module (dlrm.py / deepfm.py, with the
vocabulary and width it was exported with) and scored on Criteo test
files: prints the test AUC and log loss.

    /usr/bin/python3 deploy/examples/recsys/eval_export.py --model dlrm \\
        --export /tmp/flotilla-recsys/dlrm_trained.onnx --test /tmp/flotilla-recsys/test.tsv
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import criteo_tsv  # noqa: E402
import load_sparse_export as lse  # noqa: E402
from torch_train import MODELS, test_metrics  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="dlrm")
    ap.add_argument("--export", required=True, help="the trained .onnx file")
    ap.add_argument("--test", nargs="+", required=True)
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--hash-buckets", type=int, default=0,
                    help="the job's data.criteo.hash_buckets")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = MODELS[a.model](vocab=a.vocab, dim=a.dim)
    lse.load_onnx_initializers(model, a.export)
    tables = lse.load_sparse_export(model, a.export)
    auc, loss = test_metrics(model.eval(), criteo_tsv.read(a.test, a.hash_buckets))
    print(f"{a.export}: {len(tables)} sparse tables loaded")
    print(f"auc: {auc:.5f}")
    print(f"logloss: {loss:.5f}")


if __name__ == "__main__":
    main()
