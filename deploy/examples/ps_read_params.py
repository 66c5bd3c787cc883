#!/usr/bin/python3
"""ps_read_params.py - read the dense parameters of a running PServer job.

A short client of flotilla-pserver's public wire (docs/PROTOCOL.md), in
Python with Debian's python3-grpcio and python3-grpc-tools: it generates
its stubs from proto/flotilla.proto into a temporary directory, asks
server 0 for the job's dense layout (Stats), computes the block placement
as every trainer does, pulls each server's blocks as an observer
(trainer_id -1: no registration, the job is not disturbed) and prints one
line per parameter, or saves them all with --save FILE.npz.

    FLOTILLA_TOKEN=... deploy/examples/ps_read_params.py \\
        --pservers 10.0.0.5:6170,10.0.0.6:6170 [--ca ca.pem] [--save params.npz]

The server list defaults to FLOTILLA_PSERVERS_IP_PORT_LIST, the token to
FLOTILLA_TOKEN or the file named by FLOTILLA_TOKEN_FILE.
"""
import argparse
import os
import sys
import tempfile

import grpc
import numpy as np
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))


def stubs(proto_dir, out):
    """flotilla_pb2 and flotilla_pb2_grpc generated from proto_dir."""
    if protoc.main(["protoc", "-I" + proto_dir, "--python_out=" + out,
                    "--grpc_python_out=" + out, "flotilla.proto"]) != 0:
        sys.exit(f"cannot compile {proto_dir}/flotilla.proto")
    sys.path.insert(0, out)
    import flotilla_pb2
    import flotilla_pb2_grpc
    return flotilla_pb2, flotilla_pb2_grpc


def placement(dense, block_size, n_servers):
    """[(param index, offset, n, server)] per global block id (PROTOCOL.md)."""
    load = [0] * n_servers
    blocks = []
    for p, spec in enumerate(dense):
        for off in range(0, spec.numel, block_size):
            n = min(block_size, spec.numel - off)
            s = min(range(n_servers), key=lambda i: (load[i], i))
            load[s] += n
            blocks.append((p, off, n, s))
    return blocks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pservers", default=os.environ.get("FLOTILLA_PSERVERS_IP_PORT_LIST", ""),
                    help="host:port,... of every pserver, in the job's order")
    ap.add_argument("--ca", help="PEM CA of the job's TLS (cluster.tls.ca)")
    ap.add_argument("--proto_dir", default=os.path.join(HERE, "..", "..", "proto"))
    ap.add_argument("--save", help="write every parameter into this .npz file")
    a = ap.parse_args()
    servers = [s for s in a.pservers.split(",") if s]
    if not servers:
        sys.exit("no pservers: --pservers or FLOTILLA_PSERVERS_IP_PORT_LIST")
    token = os.environ.get("FLOTILLA_TOKEN", "")
    if not token and os.environ.get("FLOTILLA_TOKEN_FILE"):
        with open(os.environ["FLOTILLA_TOKEN_FILE"]) as f:
            token = f.read().strip()
    md = (("x-flotilla-token", token),) if token else ()
    creds = None
    if a.ca:
        with open(a.ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())

    with tempfile.TemporaryDirectory(prefix="ps_read_params.") as tmp:
        pb, pb_grpc = stubs(a.proto_dir, tmp)
        opts = [("grpc.max_receive_message_length", -1)]
        chans = [grpc.secure_channel(s, creds, opts) if creds else grpc.insecure_channel(s, opts)
                 for s in servers]
        ps = [pb_grpc.ParameterServerStub(c) for c in chans]
        st = ps[0].Stats(pb.StatsRequest(), metadata=md, timeout=10)
        if not st.dense:
            sys.exit(f"{servers[0]}: no dense layout yet (no trainer registered)")
        if st.num_servers != len(servers):
            sys.exit(f"{servers[0]} is one of {st.num_servers} servers, not {len(servers)}")
        blocks = placement(st.dense, st.dense_block_size, st.num_servers)
        values = [np.zeros(d.numel, dtype=np.float32) for d in st.dense]
        steps = []
        for s, stub in enumerate(ps):
            mine = [b for b, (_, _, _, srv) in enumerate(blocks) if srv == s]
            if not mine:
                continue
            r = stub.PullDense(pb.PullDenseRequest(trainer_id=-1, min_step=0, blocks=mine),
                               metadata=md, timeout=60)
            steps.append(r.step)
            for blk in r.blocks:
                p, off, n, _ = blocks[blk.block]
                values[p][off:off + n] = np.frombuffer(blk.value.data, dtype="<f4")
        for c in chans:
            c.close()
    print(f"step {min(steps)} ({len(blocks)} blocks over {len(servers)} servers)")
    for d, v in zip(st.dense, values):
        print(f"{d.name:24s} {d.numel:10d} floats  mean {v.mean():+.6f}  std {v.std():.6f}  "
              f"min {v.min():+.6f}  max {v.max():+.6f}")
    if a.save:
        np.savez(a.save, **{d.name: v for d, v in zip(st.dense, values)})
        print(f"saved to {a.save}")


if __name__ == "__main__":
    main()
