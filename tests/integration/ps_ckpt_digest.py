"""ps_ckpt_digest.py - one line per record of a pserver checkpoint (.flc, the
format of common/fl_ckpt.h), `name sha256`, so that two runs' final states
compare with diff: a sparse table's per-row records (keys, steps, values,
state1, state2, seen_step) are taken in key order, since the order of rows
in the file is the order the table touched them, which the timing of the
trainers decides.  meta/ records (run id, incarnations, times) and the
rows' seen_time (the wall clock when last seen) are left out.
    python3 ps_ckpt_digest.py FILE.flc"""
import hashlib
import struct
import sys

DTYPE_SIZE = {0: 4, 1: 8, 2: 8, 3: 1, 4: 4, 5: 2, 6: 2, 7: 4}
ROW_RECORDS = ("keys", "steps", "values", "state1", "state2", "seen_step")


def records(path):
    """name -> (shape, raw bytes) of every record of the file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"FLCKPT\r\n":
        sys.exit("%s: not a checkpoint" % path)
    off, out = 16, {}
    while data[off:off + 4] == b"REC1":
        nlen, _dtype, ndim = struct.unpack_from("<HBB", data, off + 4)
        off += 8
        name = data[off:off + nlen].decode()
        off += nlen
        shape = struct.unpack_from("<%dq" % ndim, data, off)
        off += 8 * ndim
        (nbytes,) = struct.unpack_from("<Q", data, off)
        off += 8
        off = (off + 7) // 8 * 8
        out[name] = (shape, data[off:off + nbytes])
        off += nbytes
    return out


def main():
    recs = records(sys.argv[1])
    tables = {n[len("sparse/"):-len("/keys")] for n in recs
              if n.startswith("sparse/") and n.endswith("/keys")}
    for t in sorted(tables):
        keys = recs["sparse/%s/keys" % t][1]
        n = len(keys) // 8
        order = sorted(range(n), key=lambda i: keys[8 * i:8 * i + 8][::-1])
        for r in ROW_RECORDS:
            name = "sparse/%s/%s" % (t, r)
            if name not in recs:
                continue
            raw = recs.pop(name)[1]
            w = len(raw) // n if n else 0
            h = hashlib.sha256(b"".join(raw[i * w:(i + 1) * w] for i in order))
            print(name, n, h.hexdigest())
    for name in sorted(recs):
        if not name.startswith("meta/") and not name.endswith("/seen_time"):
            print(name, hashlib.sha256(recs[name][1]).hexdigest())


if __name__ == "__main__":
    main()
