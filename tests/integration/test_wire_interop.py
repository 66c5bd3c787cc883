#!/usr/bin/python3
"""test_wire_interop.py - a second client of flotilla-pserver, in Python.

The pserver's wire is a public interface: proto/flotilla.proto
and proto/health.proto plus docs/PROTOCOL.md must be enough to write a
client.  This test is such a client: it generates its stubs at test time
with grpc_tools.protoc from proto/ into a temporary directory, starts real
flotilla-pserver processes on 127.0.0.x (bounded, killed at the end) and
drives the call sequence docs/PROTOCOL.md describes for two trainers (and
reads the parameters as an observer, also through the example client
deploy/examples/ps_read_params.py):
Register, PushDense(PUSH_INIT), sync steps of PushDense(PUSH_GRAD, fp32 and
fp16) and held PullDense, a retried push, PullSparse / PushSparse,
InitSparse / DumpSparse (rows created when absent, pages ascending), Barrier
(two rounds of one name), Heartbeat, Stats, SaveCheckpoint and
LoadCheckpoint, Complete - checking every parameter against the
optimizer's rule (SGD: value -= lr * mean of the gradients; sparse rows
-= sparse lr * mean of the gradients, once both trainers pushed the step;
a read-only PullSparse creates no row).  It also checks the five defects
of the wire contract through the wire:
  1. a push of step INT64_MAX or 10^12 is INVALID_ARGUMENT naming both
     steps, Stats still reports the right step and pulls are answered;
  2. a unary call without a request message is answered at once
     (INVALID_ARGUMENT, UNAUTHENTICATED without the token) and 1000 of
     them leave the pserver's memory where it was;
  3. a 96 MiB request without the token is refused without the pserver
     reading it (its peak memory does not grow by the body);
  4. a Register of a layout over --max_dense_elements, or 2^40 floats, is
     refused naming the limit, and the real job registers afterwards;
  5. LoadCheckpoint of a missing step (and of the empty request, step 0) is
     NOT_FOUND naming the step; --metrics_addr=none serves;
and grpc.health.v1.Health/Check without a token (SERVING).
Exit 0 pass, 1 fail, 77 skip (python3-grpcio or python3-grpc-tools
missing: deploy/deps.sh installs them).
"""
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from free_port import free_port  # noqa: E402 (beside this script)

try:
    import grpc
    import numpy as np
    from grpc_tools import protoc
except ImportError as e:  # pragma: no cover - depends on the host
    print(f"SKIP: {e} (Debian python3-grpcio, python3-grpc-tools and python3-numpy; "
          "deploy/deps.sh installs them)")
    sys.exit(77)

SRC = os.environ.get("FL_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("FL_BUILDDIR", ".")
PSERVER = os.path.join(BUILD, "flotilla-pserver")
TOKEN = "interop-%d-Xq7" % os.getpid()
MD = (("x-flotilla-token", TOKEN),)
LR, SPARSE_LR, BLOCK = 0.5, 0.25, 4
DEADLINE = time.monotonic() + 240  # the whole test is bounded

fails = 0


def check(cond, what):
    global fails
    if cond:
        print("ok:", what)
    else:
        fails += 1
        print("FAIL:", what)


def code_of(fn, *args, **kw):
    """(gRPC status code, details) of a call expected to fail."""
    try:
        fn(*args, **kw)
    except grpc.RpcError as e:
        return e.code(), e.details() or ""
    return grpc.StatusCode.OK, ""


def rss_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class Pserver:
    """One flotilla-pserver of a 1-server job on 127.0.0.x."""

    def __init__(self, tmp, name, trainers=2, extra=(), block=BLOCK):
        self.host = "127.0.0.%d" % random.randint(2, 250)
        self.port = free_port(self.host)
        self.addr = f"{self.host}:{self.port}"
        self.ckdir = os.path.join(tmp, name + ".ck")
        cfg = os.path.join(tmp, name + ".yaml")
        with open(cfg, "w") as f:
            f.write(f"""model: {{kind: mlp, input_shape: [1, 4, 4], num_classes: 2, hidden: [4]}}
optimizer: {{name: sgd, lr: {LR}}}
train: {{epochs: 1, batch_size: 4, seed: 11}}
cluster: {{mode: ps, heartbeat_timeout_s: 120}}
pserver:
  dense_block_size: {block}
  checkpoint_dir: {self.ckdir}
  sparse: {{optimizer: {{name: sgd, lr: {SPARSE_LR}}}, init_range: 0.5, max_rows: 1000}}
strategy: {{a_sync: false}}
""")
        env = dict(os.environ, FLOTILLA_MODE="ps", FLOTILLA_ROLE="PSERVER",
                   FLOTILLA_PSERVERS_IP_PORT_LIST=self.addr, FLOTILLA_PSERVER_ID="0",
                   FLOTILLA_TRAINERS_NUM=str(trainers), FLOTILLA_TOKEN=TOKEN)
        env.pop("FLOTILLA_TOKEN_FILE", None)
        # An ASan build keeps freed memory in quarantine: keep it small so
        # the memory figures below measure what the pserver holds.
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=1").lstrip(":")
        self.log = open(os.path.join(tmp, name + ".log"), "w")
        # --metrics_addr=none: --help promises "none: no endpoint" (defect 5)
        self.proc = subprocess.Popen([PSERVER, "--config", cfg, "--metrics_addr=none", *extra],
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.channel = grpc.insecure_channel(self.addr, options=[
            ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)])
        self.ps = pb_grpc.ParameterServerStub(self.channel)
        self.health = health_grpc.HealthStub(self.channel)

    def wait_serving(self, what):
        """SERVING from the health check (no token) within 30 s."""
        end = time.monotonic() + 30
        while time.monotonic() < end and self.proc.poll() is None:
            try:
                r = self.health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                check(r.status == health_pb2.HealthCheckResponse.SERVING,
                      f"{what}: health check without a token says SERVING")
                return True
            except grpc.RpcError:
                time.sleep(0.1)
        check(False, f"{what}: pserver serving (exit {self.proc.poll()}, log {self.log.name})")
        return False

    def stop(self):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ------------------------------------------------------------ the job's side

PARAMS = [("w", 10), ("b", 3)]  # forward order
TABLE, DIM = "emb", 4


def layout(params, block):
    """docs/PROTOCOL.md: parameters cut into blocks of <= block floats, in
    order; with one server every block is on it.  [(param, offset, n)]"""
    out = []
    for p, (_, n) in enumerate(params):
        for off in range(0, n, block):
            out.append((p, off, min(block, n - off)))
    return out


BLOCKS = layout(PARAMS, BLOCK)


def tensor(a, dtype=None):
    a = np.ascontiguousarray(a)
    if a.dtype == np.float16:
        dt = pb.DTYPE_FP16
    else:
        a = a.astype("<f4")
        dt = pb.DTYPE_FP32
    return pb.Tensor(dtype=dt, shape=list(a.shape), data=a.tobytes())


def from_tensor(t):
    assert t.dtype == pb.DTYPE_FP32
    return np.frombuffer(t.data, dtype="<f4").reshape(tuple(t.shape))


def register(ps, tid, incarnation, step=0, dense=PARAMS, block=BLOCK, trainers=2):
    return ps.Register(pb.RegisterRequest(
        trainer_id=tid, num_trainers=trainers, incarnation=incarnation, mode=pb.SYNC_MODE_SYNC,
        dense_block_size=block, num_servers=1, server_index=0,
        dense=[pb.DenseParamSpec(name=n, numel=k) for n, k in dense],
        sparse=[pb.SparseTableSpec(name=TABLE, dim=DIM)], total_steps=100, step=step),
        metadata=MD, timeout=10)


def push(ps, tid, step, grads, kind=None, half=False):
    blocks = []
    for i, (p, off, n) in enumerate(BLOCKS):
        g = grads[p][off:off + n]
        blocks.append(pb.DenseBlock(block=i, value=tensor(g.astype(np.float16) if half else g)))
    return ps.PushDense(pb.PushDenseRequest(
        trainer_id=tid, step=step, kind=pb.PUSH_GRAD if kind is None else kind, blocks=blocks),
        metadata=MD, timeout=10)


def pull(ps, tid, min_step, timeout=10):
    return ps.PullDense.future(pb.PullDenseRequest(
        trainer_id=tid, min_step=min_step, blocks=list(range(len(BLOCKS)))),
        metadata=MD, timeout=timeout)


def params_of(resp):
    out = [np.zeros(n, dtype=np.float32) for _, n in PARAMS]
    for b in resp.blocks:
        p, off, n = BLOCKS[b.block]
        out[p][off:off + n] = from_tensor(b.value)
    return out


def close(a, b, tol=1e-6):
    return all(np.allclose(x, y, rtol=0, atol=tol) for x, y in zip(a, b))


def main_sequence(tmp):
    """The trainer's call sequence with two trainers, and defects 1, 2, 3, 5."""
    s = Pserver(tmp, "job")
    try:
        if s.wait_serving("job"):
            sequence(s)
    finally:
        s.stop()


def sequence(s):
    ps = s.ps
    rng = np.random.default_rng(5)
    # Without the token every method is refused, the health check is not.
    code, _ = code_of(ps.Stats, pb.StatsRequest(), timeout=5)
    check(code == grpc.StatusCode.UNAUTHENTICATED, "Stats without the token: UNAUTHENTICATED")
    code, _ = code_of(s.health.Check, health_pb2.HealthCheckRequest(service="nope"), timeout=5)
    check(code == grpc.StatusCode.NOT_FOUND, "health check of an unknown service: NOT_FOUND")
    # The C client of the same check (Dockerfile HEALTHCHECK), in both spellings.
    for flag in ("--health_check", "--health-check"):
        hc = subprocess.run([PSERVER, f"{flag}={s.addr}"], capture_output=True, text=True,
                            timeout=30)
        check(hc.returncode == 0 and hc.stdout.strip() == f"{s.addr}: SERVING",
              f"flotilla-pserver {flag}: exit {hc.returncode}, {hc.stdout.strip()!r}")

    r0 = register(ps, 0, 1001)
    r1 = register(ps, 1, 1002)
    check(not r0.initialized and r0.step == 0 and r1.server_incarnation == r0.server_incarnation,
          "Register: step 0, not initialized, one server incarnation")
    value = [rng.standard_normal(n).astype(np.float32) for _, n in PARAMS]
    other = [v + 1 for v in value]
    a = push(ps, 0, 0, value, kind=pb.PUSH_INIT)
    b = push(ps, 1, 0, other, kind=pb.PUSH_INIT)
    check(a.accepted == len(BLOCKS) and b.duplicates == len(BLOCKS),
          "PUSH_INIT: the first trainer's values win")
    check(register(ps, 0, 1001).initialized, "Register again: initialized")

    for step in range(3):
        g0 = [rng.standard_normal(n).astype(np.float32) for _, n in PARAMS]
        g1 = [rng.standard_normal(n).astype(np.float16) for _, n in PARAMS]
        push(ps, 0, step, g0)
        held = pull(ps, 0, step + 1)
        time.sleep(0.3)
        check(not held.done(), f"step {step}: the pull waits for trainer 1's push")
        r = push(ps, 1, step, g1, half=True)
        check(r.accepted == len(BLOCKS), f"step {step}: fp16 push accepted")
        got = held.result()
        want = [v - LR * (x + y.astype(np.float32)) / 2 for v, x, y in zip(value, g0, g1)]
        check(got.step == step + 1 and close(params_of(got), want, 1e-5),
              f"step {step}: parameters = value - lr * mean gradient")
        value = params_of(got)
        # a retried push of the step is a duplicate and changes nothing
        r = push(ps, 0, step, g0)
        check(r.duplicates == len(BLOCKS) and r.accepted == 0, f"step {step}: retry is a duplicate")
    check(close(params_of(pull(ps, 1, 3).result()), value), "the retries changed nothing")

    # A reader of the running job: the layout from Stats, an observer pull,
    # and the example client deploy/examples/ps_read_params.py.
    st = ps.Stats(pb.StatsRequest(), metadata=MD, timeout=5)
    check([(d.name, d.numel) for d in st.dense] == PARAMS and st.dense_block_size == BLOCK
          and st.num_servers == 1 and st.server_index == 0, "Stats: the dense layout")
    obs = ps.PullDense(pb.PullDenseRequest(trainer_id=-1, blocks=list(range(len(BLOCKS)))),
                       metadata=MD, timeout=5)
    check(close(params_of(obs), value), "an observer (trainer_id -1) reads the parameters")
    npz = os.path.join(os.path.dirname(s.ckdir), "params.npz")
    ex = subprocess.run([sys.executable, os.path.join(SRC, "deploy", "examples", "ps_read_params.py"),
                         "--pservers", s.addr, "--proto_dir", os.path.join(SRC, "proto"),
                         "--save", npz], env=dict(os.environ, FLOTILLA_TOKEN=TOKEN),
                        capture_output=True, text=True, timeout=60)
    saved = np.load(npz) if ex.returncode == 0 else {}
    check(ex.returncode == 0 and close([saved.get("w"), saved.get("b")], value),
          f"deploy/examples/ps_read_params.py reads them ({(ex.stdout + ex.stderr).strip()[-300:]})")

    # Defect 1: the step window.
    for bad in (2**63 - 1, 10**12, 5):
        code, det = code_of(push, ps, 0, bad, [np.ones(n, np.float32) for _, n in PARAMS])
        check(code == grpc.StatusCode.INVALID_ARGUMENT and f"step {bad}" in det
              and "at step 3" in det, f"push of step {bad}: INVALID_ARGUMENT naming both steps")
    st = ps.Stats(pb.StatsRequest(), metadata=MD, timeout=5)
    check(st.step == 3, f"Stats after the refused pushes: step {st.step} (3)")
    r = pull(ps, 0, 0, timeout=5)
    check(r.result().step == 3 and close(params_of(r.result()), value),
          "PullDense(min_step=0) answered, parameters unchanged")

    # Sparse rows: created on first pull; sync: a step is applied once both
    # trainers pushed it (summed in trainer order, averaged, one SGD step),
    # and a pull asking for the next step waits for it.
    keys = [3, 77, 2**63 + 5]
    rows = from_tensor(ps.PullSparse(pb.PullSparseRequest(trainer_id=0, table=TABLE, keys=keys),
                                     metadata=MD, timeout=5).values)
    check(rows.shape == (3, DIM) and np.all(np.abs(rows) <= 0.5), "PullSparse: new rows in range")
    g1 = rng.standard_normal((3, DIM)).astype(np.float32)
    g0 = rng.standard_normal((1, DIM)).astype(np.float32)
    r = ps.PushSparse(pb.PushSparseRequest(trainer_id=1, step=3, table=TABLE, keys=keys,
                                           grads=tensor(g1), seq=0, parts=1),
                      metadata=MD, timeout=5)
    check(r.accepted == 3, "PushSparse accepted 3 rows")
    fut = ps.PullSparse.future(pb.PullSparseRequest(trainer_id=1, table=TABLE, keys=keys,
                                                    min_step=4), metadata=MD, timeout=10)
    time.sleep(0.3)
    check(not fut.done(), "PullSparse min_step 4 waits for trainer 0's push of step 3")
    ps.PushSparse(pb.PushSparseRequest(trainer_id=0, step=3, table=TABLE, keys=keys[:1],
                                       grads=tensor(g0)), metadata=MD, timeout=5)
    again = from_tensor(fut.result().values)
    mean = g1.copy()
    mean[0] = g0[0] + g1[0]
    mean *= np.float32(0.5)
    check(np.allclose(again, rows - SPARSE_LR * mean, atol=1e-6),
          "sparse rows -= lr * mean of the trainers' gradients")
    # A read-only pull creates nothing (Stats below: still 3 rows); an
    # unseen key reads as its seeded init.
    ro = from_tensor(ps.PullSparse(pb.PullSparseRequest(trainer_id=0, table=TABLE,
                                                        keys=[keys[0], 12345], read_only=True),
                                   metadata=MD, timeout=5).values)
    check(np.array_equal(ro[0], again[0]) and np.all(np.abs(ro[1]) <= 0.5) and np.any(ro[1] != 0),
          "read-only PullSparse: the stored row, and an unseen key's init")
    sparse_init_dump(ps, keys, again)
    sparse_batch(ps, keys, rng)

    # Barrier: sums in trainer order; the same name again is a new round.
    for rnd, (v0, v1) in enumerate(((1.0, 2.0), (10.0, 20.0))):
        f0 = ps.Barrier.future(pb.BarrierRequest(trainer_id=0, name="epoch", values=[v0],
                                                 value_min=7), metadata=MD, timeout=10)
        time.sleep(0.3)
        check(not f0.done(), f"barrier round {rnd}: trainer 0 waits for trainer 1")
        r1 = ps.Barrier(pb.BarrierRequest(trainer_id=1, name="epoch", values=[v1], value_min=4),
                        metadata=MD, timeout=10)
        r0 = f0.result()
        check(list(r0.sums) == [v0 + v1] and r0.min == 4 and r0.count == 2 and r1.sums == r0.sums,
              f"barrier round {rnd}: sums {list(r0.sums)}, min {r0.min}, count {r0.count}")

    hb = ps.Heartbeat(pb.HeartbeatRequest(trainer_id=0, incarnation=1001, step=3),
                      metadata=MD, timeout=5)
    check(hb.live_trainers == 2 and hb.step == 3, "Heartbeat: 2 live trainers, step 3")

    # Checkpoints: save, load a missing step (defect 5), load the saved one.
    sv = ps.SaveCheckpoint(pb.SaveCheckpointRequest(trainer_id=0), metadata=MD, timeout=10)
    check(sv.step == 3 and sv.path.endswith("ckpt-3.flc"), f"SaveCheckpoint: {sv.path}")
    for req, step in ((pb.LoadCheckpointRequest(trainer_id=0, step=999), 999),
                      (pb.LoadCheckpointRequest(), 0)):
        code, det = code_of(ps.LoadCheckpoint, req, metadata=MD, timeout=10)
        check(code == grpc.StatusCode.NOT_FOUND and f"step {step}" in det,
              f"LoadCheckpoint of missing step {step}: NOT_FOUND naming it ({det})")
    ld = ps.LoadCheckpoint(pb.LoadCheckpointRequest(trainer_id=0, step=3), metadata=MD, timeout=10)
    check(ld.step == 3, "LoadCheckpoint of step 3")
    code, _ = code_of(push, ps, 0, 3, [np.ones(n, np.float32) for _, n in PARAMS])
    check(code == grpc.StatusCode.FAILED_PRECONDITION, "after a load: FAILED_PRECONDITION (register)")
    register(ps, 0, 1001, step=3)
    register(ps, 1, 1002, step=3)
    check(close(params_of(pull(ps, 0, 3).result()), value), "the loaded parameters are step 3's")

    defect_no_message(s)
    defect_unauthenticated_body(s)

    st = ps.Stats(pb.StatsRequest(), metadata=MD, timeout=5)
    check(st.dense_blocks == len(BLOCKS) and st.dense_elements == sum(n for _, n in PARAMS)
          and st.sparse_rows == 6 and st.live_trainers == 2 and st.invalid >= 4
          and st.sparse_init_rows == 3,
          f"Stats: {st.dense_blocks} blocks, {st.dense_elements} floats, {st.sparse_rows} rows, "
          f"{st.invalid} invalid")
    for tid, left in ((0, 1), (1, 0)):
        r = ps.Complete(pb.CompleteRequest(trainer_id=tid), metadata=MD, timeout=5)
        check(r.remaining == left, f"Complete of trainer {tid}: {r.remaining} remaining")
    try:
        rc = s.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, f"the pserver exits 0 once every trainer completed (exit {rc})")


def sparse_batch(ps, keys, rng):
    """PullSparseBatch / PushSparseBatch: the parts of a batch are their own
    calls done in order; a batch pull waits until every part may be
    answered (sync: step 4 applied), a repeated batch push is a duplicate."""
    before = from_tensor(ps.PullSparse(pb.PullSparseRequest(trainer_id=0, table=TABLE, keys=keys,
                                                            read_only=True),
                                       metadata=MD, timeout=5).values)
    g1 = rng.standard_normal((3, DIM)).astype(np.float32)
    g0 = rng.standard_normal((1, DIM)).astype(np.float32)
    b1 = pb.PushSparseBatchRequest(pushes=[
        pb.PushSparseRequest(trainer_id=1, step=4, table=TABLE, keys=keys[:2],
                             grads=tensor(g1[:2]), seq=0, parts=2),
        pb.PushSparseRequest(trainer_id=1, step=4, table=TABLE, keys=keys[2:],
                             grads=tensor(g1[2:]), seq=1, parts=2)])
    r = ps.PushSparseBatch(b1, metadata=MD, timeout=5)
    acc = [p.accepted for p in r.pushes]
    check(acc == [2, 1], f"PushSparseBatch: parts accepted {acc} ([2, 1])")
    r = ps.PushSparseBatch(b1, metadata=MD, timeout=5)
    check([p.accepted for p in r.pushes] == [0, 0], "PushSparseBatch again: duplicates dropped")
    fut = ps.PullSparseBatch.future(pb.PullSparseBatchRequest(pulls=[
        pb.PullSparseRequest(trainer_id=1, table=TABLE, keys=keys[1:], min_step=5),
        pb.PullSparseRequest(trainer_id=1, table=TABLE, keys=keys[:1], min_step=5,
                             read_only=True)]), metadata=MD, timeout=10)
    time.sleep(0.3)
    check(not fut.done(), "PullSparseBatch min_step 5 waits for trainer 0's push of step 4")
    ps.PushSparseBatch(pb.PushSparseBatchRequest(pushes=[
        pb.PushSparseRequest(trainer_id=0, step=4, table=TABLE, keys=keys[:1],
                             grads=tensor(g0))]), metadata=MD, timeout=5)
    parts = fut.result().pulls
    mean = g1.copy()
    mean[0] = g0[0] + g1[0]
    mean *= np.float32(0.5)
    want = before - SPARSE_LR * mean
    check(len(parts) == 2 and np.allclose(from_tensor(parts[0].values), want[1:], atol=1e-6)
          and np.allclose(from_tensor(parts[1].values), want[:1], atol=1e-6),
          "PullSparseBatch: each part's rows, after the step the batch push applied")


def sparse_init_dump(ps, keys, rows):
    """InitSparse creates the rows that do not exist yet with the values sent
    (existing rows stay; a repeat creates nothing); DumpSparse lists the
    table in pages, keys ascending, changing nothing."""
    new = [2**64 - 1, 1001, 0]
    vals = np.arange(4 * DIM, dtype=np.float32).reshape(4, DIM)
    req = pb.InitSparseRequest(trainer_id=0, table=TABLE, keys=[keys[0]] + new,
                               values=tensor(vals))
    r = ps.InitSparse(req, metadata=MD, timeout=5)
    check(r.created == 3, f"InitSparse created the 3 new rows of 4 ({r.created})")
    req = pb.InitSparseRequest(trainer_id=1, table=TABLE, keys=[keys[0]] + new,
                               values=tensor(vals + 1))
    r = ps.InitSparse(req, metadata=MD, timeout=5)
    check(r.created == 0, f"InitSparse again (another trainer): nothing created ({r.created})")
    code, det = code_of(ps.InitSparse, pb.InitSparseRequest(trainer_id=0, table=TABLE,
                                                            keys=[5, 6], values=tensor(vals)),
                        metadata=MD, timeout=5)
    check(code == grpc.StatusCode.INVALID_ARGUMENT and "must be [2, %d]" % DIM in det,
          f"InitSparse of 2 keys with 4 rows: INVALID_ARGUMENT ({det})")
    got_k, got_v, after, has_after, pages = [], [], 0, False, 0
    while pages < 10:
        d = ps.DumpSparse(pb.DumpSparseRequest(trainer_id=-1, table=TABLE, after_key=after,
                                               has_after=has_after, max_rows=2),
                          metadata=MD, timeout=5)
        pages += 1
        got_k += list(d.keys)
        if d.keys:
            got_v.append(from_tensor(d.values))
            after, has_after = d.keys[-1], True
        if not d.more:
            break
    want = sorted(keys + new)
    check(got_k == want and pages == 3, f"DumpSparse: {got_k} in {pages} pages ({want})")
    got_v = np.concatenate(got_v) if got_v else np.zeros((0, DIM), np.float32)
    by_key = dict(zip(got_k, got_v))
    check(all(np.array_equal(by_key.get(k), vals[i + 1]) for i, k in enumerate(new))
          and np.array_equal(by_key.get(keys[0]), rows[0]),
          "DumpSparse: the values InitSparse sent, and the existing row unchanged")
    code, det = code_of(ps.DumpSparse, pb.DumpSparseRequest(trainer_id=-1, table="nope"),
                        metadata=MD, timeout=5)
    check(code == grpc.StatusCode.INVALID_ARGUMENT and "unknown table" in det,
          f"DumpSparse of an unknown table: INVALID_ARGUMENT ({det})")


def defect_no_message(s):
    """Defect 2: a unary call without a request message."""
    ident = lambda b: b  # noqa: E731
    nomsg = s.channel.stream_unary("/flotilla.ParameterServer/Stats",
                                   request_serializer=ident, response_deserializer=ident)
    t0 = time.monotonic()
    code, det = code_of(nomsg, iter(()), metadata=MD, timeout=10)
    check(code == grpc.StatusCode.INVALID_ARGUMENT and time.monotonic() - t0 < 5,
          f"a call without a message: {code} at once ({det})")
    code, _ = code_of(nomsg, iter(()), timeout=10)
    check(code == grpc.StatusCode.UNAUTHENTICATED, "without a message or token: UNAUTHENTICATED")

    def burst(n):
        fs = [nomsg.future(iter(()), metadata=MD, timeout=20) for _ in range(n)]
        return sum(1 for f in fs if f.exception() is not None
                   and f.code() == grpc.StatusCode.INVALID_ARGUMENT)
    burst(300)  # warm: the call pool and gRPC's buffers reach their size
    before = rss_kib(s.proc.pid, "VmRSS")
    answered = sum(burst(250) for _ in range(4))
    grown = rss_kib(s.proc.pid, "VmRSS") - before
    check(answered == 1000, f"1000 calls without a message: {answered} answered INVALID_ARGUMENT")
    check(grown < 4096, f"1000 calls without a message: the pserver grew by {grown} KiB (< 4 MiB)")


def defect_unauthenticated_body(s):
    """Defect 3: the token is checked before the body is read."""
    ident = lambda b: b  # noqa: E731
    raw = s.channel.unary_unary("/flotilla.ParameterServer/PushDense",
                                request_serializer=ident, response_deserializer=ident)
    body = bytes(96 << 20)
    peak = rss_kib(s.proc.pid, "VmHWM")
    code, _ = code_of(raw, body, timeout=30)
    check(code == grpc.StatusCode.UNAUTHENTICATED, f"96 MiB without the token: {code}")
    grown = rss_kib(s.proc.pid, "VmHWM") - peak
    check(grown < 32 << 10, f"96 MiB without the token: the pserver's peak grew by {grown} KiB "
          "(< 32 MiB: the body was not read)")
    # with the token the same bytes are read, and refused as malformed
    code, _ = code_of(raw, bytes(1 << 10) + b"\xff", metadata=MD, timeout=30)
    check(code == grpc.StatusCode.INVALID_ARGUMENT, "garbage with the token: INVALID_ARGUMENT")


def defect_layout_limit(tmp):
    """Defect 4: a layout over --max_dense_elements or 2^40 floats."""
    big = 2**28  # floats per block (the most): 2^40 floats are 4096 blocks
    s = Pserver(tmp, "limit", trainers=1, extra=["--max_dense_elements=100"], block=big)
    try:
        if not s.wait_serving("limit"):
            return
        code, det = code_of(register, s.ps, 0, 5, dense=[("huge", 2**40)], block=big,
                             trainers=1)
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "limit of 100" in det,
              f"Register of 2^40 floats: INVALID_ARGUMENT naming the limit ({det})")
        code, det = code_of(register, s.ps, 0, 5, dense=[("w", 101)], block=big, trainers=1)
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "limit of 100" in det,
              "Register of 101 floats over a limit of 100: refused")
        r = register(s.ps, 0, 5, dense=[("w", 100)], block=big, trainers=1)
        check(not r.initialized, "Register of 100 floats: the job starts")
    finally:
        s.stop()


def main():
    global pb, pb_grpc, health_pb2, health_grpc
    if not os.access(PSERVER, os.X_OK):
        print(f"FAIL: no {PSERVER} (FL_BUILDDIR)")
        return 1
    with tempfile.TemporaryDirectory(prefix="fl_wire_interop.") as tmp:
        stubs = os.path.join(tmp, "stubs")
        os.mkdir(stubs)
        rc = protoc.main(["protoc", "-I" + os.path.join(SRC, "proto"), "--python_out=" + stubs,
                          "--grpc_python_out=" + stubs, "flotilla.proto", "health.proto"])
        if rc != 0:
            print("FAIL: grpc_tools.protoc could not compile proto/")
            return 1
        sys.path.insert(0, stubs)
        import flotilla_pb2 as pb
        import flotilla_pb2_grpc as pb_grpc
        import health_pb2
        import health_pb2_grpc as health_grpc
        # a watchdog: the whole test is bounded whatever hangs
        dog = threading.Timer(max(1.0, DEADLINE - time.monotonic()),
                              lambda: (print("FAIL: time limit", flush=True), os._exit(1)))
        dog.daemon = True
        dog.start()
        for name, part in (("job", main_sequence), ("limit", defect_layout_limit)):
            try:
                part(tmp)
            except Exception as e:  # a call that should have worked did not
                check(False, f"{name}: {type(e).__name__}: {e}")
        if fails:
            for name in ("job", "limit"):
                path = os.path.join(tmp, name + ".log")
                if os.path.exists(path):
                    print(f"---- {name}.log (last lines)")
                    print("".join(open(path).readlines()[-30:]))
    print(f"{'FAIL' if fails else 'PASS'}: {fails} failed checks")
    return 1 if fails else 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    os._exit(rc)
