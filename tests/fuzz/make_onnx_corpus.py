#!/usr/bin/python3
"""make_onnx_corpus.py - the seed corpus of tests/fuzz/fuzz_onnx.c.

Writes tests/fuzz/corpus/onnx/<name>: one flag byte (fuzz_onnx.c's
framing: bit 0 through a file, bits 1-2 the loss, bit 3 output named
"output") and a small ONNX model: valid ones that reach every path of the
importer (Gemm MLP, Conv/BN/pool CNN with int32 shape initializers,
Constant and ConstantOfShape, a Shape->Gather->Concat->Reshape subgraph,
initializers listed as inputs, several outputs, a bool Dropout
training_mode) and hostile ones (cycle,
missing input, subgraph, old opset, foreign domain, external data, short
raw data, overflowing dims, symbolic feature dim, int8 data), and one seed
per op type of the one-op PyTorch fixtures (tests/fixtures/ops).

Run with Debian's interpreter (python3-onnx), from anywhere:
    /usr/bin/python3 tests/fuzz/make_onnx_corpus.py
The output is deterministic; the files are committed.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "onnx")
rng = np.random.default_rng(7)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32) * 0.1


def init(name, arr):
    return numpy_helper.from_array(arr, name)


def model(nodes, inits, inputs, outputs, opset=17, domain=""):
    g = helper.make_graph(nodes, "seed", inputs, outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(domain, opset)],
                          producer_name="make_onnx_corpus")
    m.ir_version = 8
    return m


def x_in(*dims):
    return helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", *dims])


def y_out(name="output"):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", None])


def mlp():
    return model([
        helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], "fc1", transB=1),
        helper.make_node("Relu", ["h"], ["hr"], "relu"),
        helper.make_node("Gemm", ["hr", "fc2.weight", "fc2.bias"], ["output"], "fc2", transB=1),
    ], [init("fc1.weight", f32(6, 4)), init("fc1.bias", f32(6)),
        init("fc2.weight", f32(3, 6)), init("fc2.bias", f32(3))], [x_in(4)], [y_out()])


def cnn():
    shape = np.array([0, -1], dtype=np.int32)
    return model([
        helper.make_node("Conv", ["input", "conv.weight", "conv.bias"], ["c"], "conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn.weight", "bn.bias", "bn.running_mean",
                                                "bn.running_var"], ["b"], "bn", epsilon=1e-5,
                         momentum=0.9),
        helper.make_node("Relu", ["b"], ["r"], "relu"),
        helper.make_node("MaxPool", ["r"], ["p"], "pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "shape"], ["f"], "flat"),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["output"], "fc", transB=1),
    ], [init("conv.weight", f32(2, 1, 3, 3)), init("conv.bias", f32(2)),
        init("bn.weight", np.ones(2, np.float32)), init("bn.bias", np.zeros(2, np.float32)),
        init("bn.running_mean", np.zeros(2, np.float32)),
        init("bn.running_var", np.ones(2, np.float32)), init("shape", shape),
        init("fc.weight", f32(3, 8)), init("fc.bias", f32(3))], [x_in(1, 4, 4)], [y_out()])


def shapes():
    """Shape->Gather->Unsqueeze->Concat->Reshape, Constant and ConstantOfShape."""
    return model([
        helper.make_node("Shape", ["input"], ["s"], "shape"),
        helper.make_node("Constant", [], ["zero"], "c0", value=numpy_helper.from_array(
            np.array(0, np.int64))),
        helper.make_node("Gather", ["s", "zero"], ["b"], "gather", axis=0),
        helper.make_node("Constant", [], ["ax"], "c1", value_ints=[0]),
        helper.make_node("Unsqueeze", ["b", "ax"], ["b1"], "unsq"),
        helper.make_node("Constant", [], ["m1"], "c2", value_ints=[-1]),
        helper.make_node("Concat", ["b1", "m1"], ["tgt"], "concat", axis=0),
        helper.make_node("Reshape", ["input", "tgt"], ["flat"], "reshape"),
        helper.make_node("Constant", [], ["two"], "c3", value_float=2.0),
        helper.make_node("Mul", ["flat", "two"], ["dbl"], "mul"),
        helper.make_node("Shape", ["dbl"], ["ds"], "shape2"),
        helper.make_node("ConstantOfShape", ["ds"], ["ones"], "cos",
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Add", ["dbl", "ones"], ["sum"], "add"),
        helper.make_node("Gemm", ["sum", "w", "b0"], ["output"], "fc", transB=1),
    ], [init("w", f32(2, 6)), init("b0", f32(2))], [x_in(2, 3)], [y_out()])


def legacy_inputs():
    m = mlp()
    for t in m.graph.initializer:
        m.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return m


def two_outputs():
    m = mlp()
    m.graph.output.append(y_out("hr"))
    return m


def cycle():
    return model([helper.make_node("Add", ["input", "b"], ["a"], "a"),
                  helper.make_node("Relu", ["a"], ["b"], "b"),
                  helper.make_node("Relu", ["b"], ["output"], "out")], [], [x_in(4)], [y_out()])


def missing():
    return model([helper.make_node("Add", ["input", "nowhere"], ["output"], "add")], [],
                 [x_in(4)], [y_out()])


def subgraph():
    body = helper.make_graph([helper.make_node("Identity", ["input"], ["o"])], "then", [],
                             [y_out("o")])
    m = mlp()
    del m.graph.node[2]
    m.graph.node.append(helper.make_node("If", ["hr"], ["output"], "if", then_branch=body,
                                         else_branch=body))
    return m


def old_opset():
    m = mlp()
    m.opset_import[0].version = 11
    return m


def foreign_domain():
    m = mlp()
    m.graph.node[1].domain = "com.microsoft"
    return m


def external():
    m = mlp()
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", "weights.bin"
    return m


def short_raw():
    m = mlp()
    m.graph.initializer[0].dims[0] = 1000
    return m


def overflow_dims():
    m = mlp()
    del m.graph.initializer[0].dims[:]
    m.graph.initializer[0].dims.extend([1 << 40, 1 << 40])
    return m


def symbolic_feature():
    m = mlp()
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "features"
    return m


def dropout_bool():
    """PyTorch's training export: Dropout with a bool training_mode constant."""
    m = mlp()
    m.graph.node[2].input[0] = "hd"
    m.graph.node.insert(2, helper.make_node("Dropout", ["hr", "ratio", "tmode"], ["hd"], "drop"))
    m.graph.node.insert(0, helper.make_node("Constant", [], ["tmode"], "c_tm", value=
                                            numpy_helper.from_array(np.array(True))))
    m.graph.initializer.append(init("ratio", np.array(0.25, np.float32)))
    return m


def int8_init():
    m = mlp()
    m.graph.initializer[1].CopyFrom(init("fc1.bias", np.arange(6, dtype=np.int8)))
    return m


SEEDS = [
    ("mlp", 0, mlp), ("mlp_file_mse", 1 | 4, mlp), ("cnn_bn", 0, cnn), ("cnn_bn_named", 8, cnn),
    ("shape_subgraph", 0, shapes), ("legacy_inputs", 2, legacy_inputs),
    ("two_outputs", 0, two_outputs), ("two_outputs_named", 8, two_outputs),
    ("cycle", 0, cycle), ("missing_input", 0, missing), ("subgraph", 0, subgraph),
    ("old_opset", 0, old_opset), ("foreign_domain", 0, foreign_domain),
    ("external_data", 0, external), ("short_raw", 0, short_raw),
    ("overflow_dims", 0, overflow_dims), ("symbolic_feature", 0, symbolic_feature),
    ("int8_init", 0, int8_init), ("dropout_bool", 0, dropout_bool),
]


FIXTURES = os.path.join(os.path.dirname(OUT), "..", "..", "fixtures", "ops")
LOSS_FLAGS = {"softmax_cross_entropy": 0, "bce_with_logits": 2, "mse": 4}


def op_seeds():
    """One seed per op type the one-op PyTorch fixtures exercise (their
    smallest file; output named "output", the case's loss): every op's
    attribute parsing, as exported by PyTorch, is a starting point."""
    best = {}
    for f in sorted(os.listdir(FIXTURES)):
        if not f.endswith(".case"):
            continue
        name = f[:-5]
        path = os.path.join(FIXTURES, name + ".onnx")
        with open(os.path.join(FIXTURES, f)) as c:
            loss = c.read().split()[1]
        types = {n.op_type for n in onnx.load(path).graph.node}
        size = os.path.getsize(path)
        for t in types:
            if t not in best or size < best[t][1]:
                best[t] = (path, size, loss)
    return {("op_" + t, 8 | LOSS_FLAGS[loss], path) for t, (path, _, loss) in best.items()}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, flags, make in SEEDS:
        data = make().SerializeToString()
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(bytes([flags]) + data)
    ops = sorted(op_seeds())
    for name, flags, path in ops:
        with open(path, "rb") as src, open(os.path.join(OUT, name), "wb") as f:
            f.write(bytes([flags]) + src.read())
    print(f"{len(SEEDS)} seeds and {len(ops)} op seeds in {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
