#!/usr/bin/python3
"""allreduce_model.py - an alpha-beta cost model of the allreduce Flotilla
runs (flat ring over TCP, the hierarchical composition: shm inside a node,
ring between node leaders; nccl_comm_num parallel rings), fitted to the
namespace measurements of tests/bench/run_bench_netns.sh, then used to
predict bus bandwidth and time per step for a ResNet-50-sized gradient
(25.6 M fp32 parameters) at 8 .. 4096 nodes x 8 ranks on 100 and 400 Gbit/s.

Model (p ranks, N nodes of g ranks, S bytes, link rate L bytes/s):
  flat ring       T = 2(p-1) a + 2(p-1)/p S / min(e L, k s)
  hierarchical    T = 2(g-1)/g S / B + 2(N-1) a + 2(N-1)/N S / min(e L, k s)
a: latency of one ring step; e: the fraction of the link rate a ring
reaches when the link is the limit; s: what one ring moves when the host,
not the link, is the limit (k = nccl_comm_num rings in parallel); B: the
bus bandwidth of the shm allreduce inside a node.  Fitted from:
  e   ring_3x1 at the lowest cap, messages >= 16 MiB (link-bound);
  a   ring_3x1 64 KiB messages (below the shaper's bucket: they pass at
      host speed, so their time is latency plus bytes at the best rate
      measured);
  s   ring_3x1 at the highest cap, 64 MiB, when that cap was not reached;
  B   shm_1x2 (2 ranks of one node), 64 MiB.
The fit error is printed for every ring_3x1 point, those outside the
model's range marked.

The latency-optimal algorithms (trainer/collective/algo.c; the same
formulas as coll_model_time, which picks per bucket size at run time):
  halving-doubling  T = l_hd 2 log2(q) a + f_hd (2(q-1)/q S / r)  [+ l_hd 2a +
                    f_hd 2S/r when p is not a power of two: q = 2^floor(log2 p),
                    the fold]; latency-bound buckets by recursive doubling:
                    T = l_hd log2(q) a + f_hd log2(q) S / r [+ the fold], where
                    that is less (coll_algo_doubling; printed
                    "halving_doubling (doubling)")
  double tree       T = 2 (d + c - 1)(l_tree a + f_tree 2 C / r),  d = floor(log2 p),
                    c = ceil(S / 2C) pieces of C = min(C*, S/2) per tree, C* the
                    largest power of two (4 KiB .. 4 MiB) whose T with l = f = 1
                    is within 25% of the least (coll_algo_seg)
  ring              T = l_ring 2(p-1) a + f_ring 2(p-1)/p S / r
(r = min(e L, k s)).  l, f: each algorithm's latency and bandwidth
factors, which the run-time probe measures on the whole group (allreduces
of each algorithm at two sizes, tune.c, solved for l and f); 1 here unless
given.  The crossovers (the bucket sizes where the fastest
algorithm changes) are printed for 2 .. 4096 nodes, twice: the model's
fastest of the three, and what tune.c's automatic choice runs given these
times (`auto`), which differs in three ways:
  - the probe measures at G and G/16, G = 1 MiB halved (not below 64 KiB)
    while the plain model (factors 1) gives the ring over 50 ms for it;
    at those two sizes, of two algorithms within 5% the one of fewer
    latency steps (halving-doubling, the tree, the ring);
  - up to G, the model's fastest (the table);
  - above G (the 4 MiB rule: the ring and halving-doubling measured at 4 G
    and extrapolated, tune.c's above_pick), never the tree, and
    halving-doubling only where the ring's time is over 1.05 times its own.

Usage: allreduce_model.py FIGURES [--png OUT.png] [--table OUT.md]
       allreduce_model.py --crossovers ALPHA_US GBIT [L_RING L_HD L_TREE F_RING F_HD F_TREE]
                          (no figures: e = 1; l and f as the probe logs them,
                          "latency xL_RING, xL_HD, xL_TREE, bandwidth xF_RING, ...")
FIGURES: the --out file of run_bench_netns.sh.  Needs gnuplot for the PNG.
"""
import math
import os
import re
import subprocess
import sys

GPUS = 8
S_GRAD = 25.6e6 * 4          # bytes: 25.6 M fp32 gradients
BUCKET = 32 * 2**20          # fuse_grad_size_in_MB default (32 MB)
NODES = [8, 64, 512, 4096]
LINKS_GBIT = [100, 400]


def load(path):
    fig = {}
    for line in open(path):
        m = re.match(r"^(time|busbw)_(\w+?)_(\d+)x(\d+)_(\d+)gbit_(\d+)(KiB|MiB): ([0-9.e+-]+)", line)
        if m:
            kind, name, nodes, per, cap, sz, unit, v = m.groups()
            size = int(sz) * (1024 if unit == "KiB" else 2**20)
            fig[(kind, name, int(nodes), int(per), int(cap), size)] = float(v)
    return fig


def lsq2(rows):
    """Least squares for t ~ x1*u + x2*v with rows (u, v, t), weighted by
    1/t (relative error).  Returns (u, v)."""
    suu = suv = svv = sut = svt = 0.0
    for x1, x2, t in rows:
        w = 1.0 / (t * t)
        suu += w * x1 * x1; suv += w * x1 * x2; svv += w * x2 * x2
        sut += w * x1 * t; svt += w * x2 * t
    det = suu * svv - suv * suv
    return ((sut * svv - svt * suv) / det, (svt * suu - sut * suv) / det)


def fit(fig):
    """a, e, s, B and the per-point errors (see the module comment)."""
    ring = [(c, n, size, t) for (kind, name, n, per, c, size), t in fig.items()
            if kind == "time" and name == "ring" and per == 1]
    caps = sorted({r[0] for r in ring})
    lo, hi = caps[0], caps[-1]
    es = [(2 * (n - 1) / n * size / (c * 1e9 / 8)) / t for c, n, size, t in ring
          if c == lo and size >= 2**24]
    e = sum(es) / len(es)
    fast = max(2 * (n - 1) / n * size / t for c, n, size, t in ring)
    small = min(r[2] for r in ring)
    al = [(t - 2 * (n - 1) / n * size / fast) / (2 * (n - 1)) for c, n, size, t in ring if size == small]
    a = max(0.0, sum(al) / len(al))
    s = max(2 * (n - 1) / n * size / (t - 2 * (n - 1) * a)
            for c, n, size, t in ring if c == hi and size == max(r[2] for r in ring))
    if s >= 0.9 * e * hi * 1e9 / 8:
        s = float("inf")  # the hosts kept up with the highest cap
    errs = []
    for c, n, size, t in ring:
        # The shaper (tbf) lets a bucket of about 1 ms of its rate pass at
        # host speed: a message that fits in a few buckets is not link-bound.
        bucket = c * 128 * 1024
        inside = 2 * (n - 1) / n * size <= 4 * bucket
        if inside:
            pred = 2 * (n - 1) * a + 2 * (n - 1) / n * size / fast
        else:
            pred = t_ring(n, size, c * 1e9 / 8, a, e, s)
        note = ("fit (e)" if c == lo and size >= 2**24 else "fit (a)" if size == small else
                "fit (s)" if c == hi and size == max(r[2] for r in ring) and s != float("inf") else "check")
        if inside:
            note += ", below the shaper's bucket: host speed"
        errs.append((c, size, t, pred, (pred - t) / t, note))
    bs = [2 * (per - 1) / per * size / t for (kind, name, n, per, c, size), t in fig.items()
          if kind == "time" and name == "shm" and size == max(r[2] for r in ring)]
    B = max(bs) if bs else float("inf")
    return a, e, s, B, errs


def t_ring(p, S, L, a, e, s, k=1):
    return 2 * (p - 1) * a + 2 * (p - 1) / p * S / min(e * L, k * s)


def t_hier(N, g, S, L, a, e, s, B, k=1):
    return 2 * (g - 1) / g * S / B + t_ring(N, S, L, a, e, s, k)


SEG_MIN, SEG_MAX = 4 * 1024, 4 * 2**20
SEG_MARGIN = 1.25  # coll_algo_seg's: the largest piece within 25% of the fastest


def hd_doubles(p, S, r, a, f=1.0, l=1.0):
    """Whether halving-doubling runs S by recursive doubling, as
    coll_algo_doubling: log2(q) exchanges of the whole bucket beat
    recursive halving's 2 log2(q) smaller ones, with its factors."""
    q = 2 ** int(math.floor(math.log2(p)))
    k = math.log2(q)
    return p > 1 and l * k * a + f * k * S / r < l * 2 * k * a + f * 2 * (q - 1) / q * S / r


def t_hd(p, S, r, a, f=1.0, l=1.0):
    q = 2 ** int(math.floor(math.log2(p)))
    k = math.log2(q)
    fold = 0.0 if q == p else l * 2 * a + f * 2 * S / r
    if hd_doubles(p, S, r, a, f, l):
        return l * k * a + f * k * S / r + fold
    return l * 2 * k * a + f * 2 * (q - 1) / q * S / r + fold


def tree_seg(p, S, r, a):
    """The tree's piece, as coll_algo_seg: the largest power of two from
    SEG_MIN to SEG_MAX that the plain model (factors 1) gives within
    SEG_MARGIN of the least time, none past the first that holds S/2
    whole."""
    ts, c = [], SEG_MIN
    while c <= SEG_MAX:
        ts.append((c, t_tree(p, S, r, a, c)))
        if 2 * c >= S:
            break
        c *= 2
    least = min(t for _, t in ts)
    return max(c for c, t in ts if t <= least * SEG_MARGIN)


def t_tree(p, S, r, a, C=None, f=1.0, l=1.0):
    half = S / 2.0
    c = min(C if C else tree_seg(p, S, r, a), half)
    return 2 * (math.floor(math.log2(p)) + math.ceil(half / c) - 1) * (l * a + f * 2 * c / r)


PLAIN = ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0))
GROUP_MAX, GROUP_MIN, GROUP_BUDGET_S = 2**20, 2**16, 0.05  # tune.c's group probe size
EVEN = 1.05                                                 # tune.c's GROUP_EVEN
PREFER = ("halving_doubling", "tree", "ring")               # tune.c's prefer[], first first


def times(p, S, r, a, lf=PLAIN):
    l, f = lf
    return {"ring": l[0] * 2 * (p - 1) * a + f[0] * 2 * (p - 1) / p * S / r,
            "halving_doubling": t_hd(p, S, r, a, f[1], l[1]), "tree": t_tree(p, S, r, a, f=f[2], l=l[2])}


def named(w, p, S, r, a, lf):
    l, f = lf
    return w + " (doubling)" if w == "halving_doubling" and hd_doubles(p, S, r, a, f[1], l[1]) else w


def best(p, S, r, a, lf=PLAIN):
    ts = times(p, S, r, a, lf)
    return named(min(ts, key=ts.get), p, S, r, a, lf)


def group_bytes(p, r, a):
    """The group probe's large size G, as tune.c's group_bytes."""
    g = GROUP_MAX
    while g > GROUP_MIN and times(p, g, r, a)["ring"] > GROUP_BUDGET_S:
        g //= 2
    return g


def auto(p, S, r, a, lf=PLAIN):
    """What tune.c's table runs for a bucket of S bytes when the probe
    measures these times (see the module comment)."""
    g = group_bytes(p, r, a)
    ts = times(p, S, r, a, lf)
    if S > g:
        w = "halving_doubling" if ts["ring"] > EVEN * ts["halving_doubling"] else "ring"
    elif S in (g, g // 16):
        order = sorted(ts, key=ts.get)
        w = order[0]
        if ts[order[1]] <= EVEN * ts[order[0]]:
            w = min(order[:2], key=PREFER.index)
    else:
        w = min(ts, key=ts.get)
    return named(w, p, S, r, a, lf)


def crossovers(a, r, say, lf=PLAIN):
    """Per bucket size (powers of two, 1 KiB .. 1 GiB) the model's fastest
    algorithm and tune.c's pick (auto), and where each changes, for 2 ..
    4096 nodes (one rank each, or the node leaders of the hierarchical
    composition); lf: the latency and the bandwidth factors of ring,
    halving-doubling and tree."""
    say("Crossovers (alpha %.1f us, %.2f GB/s per link, latency x%.2f, x%.2f, x%.2f, bandwidth "
        "x%.2f, x%.2f, x%.2f): allreduce by bucket size, the model's fastest and auto's pick" %
        ((a * 1e6, r / 1e9) + tuple(lf[0]) + tuple(lf[1])))
    for p in [2, 3, 4, 8, 9, 16, 64, 256, 1024, 4096]:
        for label, pick in (("fastest", best), ("auto", auto)):
            prev, parts = None, []
            for b in range(10, 31):
                w = pick(p, 2 ** b, r, a, lf)
                if w != prev:
                    parts.append("%s from %s" % (w, "%d KiB" % (2 ** b >> 10) if b < 20 else "%d MiB" % (2 ** b >> 20)))
                    prev = w
            say("  %4d nodes %-7s (probe at %4d KiB): %s" %
                (p, label, group_bytes(p, r, a) >> 10, ", ".join(parts)))


def busbw(p, S, t):
    return 2 * (p - 1) / p * S / t


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    png = table = None
    if "--png" in args:
        png = args[args.index("--png") + 1]
    if "--table" in args:
        table = args[args.index("--table") + 1]
    if args[0] == "--crossovers":
        lines = []
        v = [float(x) for x in args[3:9]] if len(args) >= 9 else [1.0] * 6
        crossovers(float(args[1]) * 1e-6, float(args[2]) * 1e9 / 8, lines.append,
                   (tuple(v[:3]), tuple(v[3:])))
        print("\n".join(lines))
        return 0
    fig = load(args[0])
    if not any(k[1] == "ring" for k in fig):
        print("allreduce_model: no ring_3x1 figures in", args[0])
        return 1
    a, e, s1, c, errs = fit(fig)  # c: the shm bus bandwidth B
    out = []
    say = lambda s="": out.append(s)
    say("fit: alpha = %.1f us per ring step, link efficiency e = %.3f, one ring when the host "
        "limits s = %s, shm bus bandwidth inside a node B = %.2f GB/s" %
        (a * 1e6, e, "above the highest cap" if s1 == float("inf") else "%.3f GB/s" % (s1 / 1e9), c / 1e9))
    say("fit error (ring, 3 nodes x 1 rank):")
    for cap, size, t, pred, rel, note in sorted(errs):
        say("  %2d Gbit/s %6d KiB: measured %.6f s, model %.6f s, error %+6.1f%%  %s" %
            (cap, size // 1024, t, pred, 100 * rel, note))
    rms = math.sqrt(sum(r[4] ** 2 for r in errs) / len(errs))
    big = [r for r in errs if "bucket" not in r[5]]
    say("  rms relative error %.1f%% over all %d points; %.1f%% over the %d link- or host-bound ones" %
        (100 * rms, len(errs), 100 * math.sqrt(sum(r[4] ** 2 for r in big) / max(len(big), 1)), len(big)))
    say()
    say("Prediction: %.1f MB fp32 gradient (25.6 M parameters), %d ranks a node" % (S_GRAD / 1e6, GPUS))
    say("Link-bound hosts assumed: k = nccl_comm_num rings that hosts moving s per ring need to fill "
        "e x link (k = 1 when s did not limit); the times use that k.  Intra-node: Flotilla's CPU "
        "shm stage at the measured B.")
    hdr = ("| link | nodes | ranks | k | flat ring busbw | flat ring time | latency share (flat) | "
           "hier busbw | hier time | latency share (hier) | exposed after overlap (hier) |")
    rowsmd = [hdr, "|" + "---|" * 11]
    plot = {}
    for lg in LINKS_GBIT:
        L = lg * 1e9 / 8
        k = 1 if s1 == float("inf") else max(1, math.ceil(e * L / s1))
        for N in NODES:
            p = N * GPUS
            tf = t_ring(p, S_GRAD, L, a, e, s1, k)
            th = t_hier(N, GPUS, S_GRAD, L, a, e, s1, c, k)
            # Overlap: buckets of BUCKET bytes go out while backward runs;
            # only the last bucket's allreduce always shows.
            tb = t_hier(N, GPUS, min(BUCKET, S_GRAD), L, a, e, s1, c, k)
            rowsmd.append("| %d Gbit/s | %d | %d | %d | %.2f GB/s | %.4f s | %.0f%% | %.2f GB/s | %.4f s | "
                          "%.0f%% | %.4f s (last 32 MB bucket) when backward >= %.4f s |" %
                          (lg, N, p, k, busbw(p, S_GRAD, tf) / 1e9, tf, 100 * 2 * (p - 1) * a / tf,
                           busbw(p, S_GRAD, th) / 1e9, th, 100 * 2 * (N - 1) * a / th, tb, th - tb))
        xs = [2**i for i in range(0, 13)]
        plot[lg] = [(n, busbw(n * GPUS, S_GRAD, t_ring(n * GPUS, S_GRAD, L, a, e, s1, k)) / 1e9,
                     busbw(n * GPUS, S_GRAD, t_hier(n, GPUS, S_GRAD, L, a, e, s1, c, k)) / 1e9) for n in xs]
        cross = next((n for n in range(2, 100000)
                      if t_hier(n, GPUS, S_GRAD, L, a, e, s1, c, k) < t_ring(n * GPUS, S_GRAD, L, a, e, s1, k)),
                     None)
        say("  %d Gbit/s (k = %d): hierarchical overtakes the flat ring from %s nodes" %
            (lg, k, cross if cross else "no node count below 100000"))
    for r in rowsmd:
        say(r)
    for lg in LINKS_GBIT:
        L = lg * 1e9 / 8
        k = 1 if s1 == float("inf") else max(1, math.ceil(e * L / s1))
        crossovers(a, min(e * L, k * s1), say)
    p = NODES[-1] * GPUS
    L = LINKS_GBIT[-1] * 1e9 / 8
    k = 1 if s1 == float("inf") else max(1, math.ceil(e * L / s1))
    tf = t_ring(p, S_GRAD, L, a, e, s1, k)
    th = t_hier(NODES[-1], GPUS, S_GRAD, L, a, e, s1, c, k)
    say()
    say("At %d ranks on %d Gbit/s the flat ring's latency term 2(p-1)a = %.3f s is %.0f%% of its "
        "%.3f s, the hierarchical ring's 2(N-1)a = %.3f s is %.0f%% of %.3f s." %
        (p, LINKS_GBIT[-1], 2 * (p - 1) * a, 100 * 2 * (p - 1) * a / tf, tf,
         2 * (NODES[-1] - 1) * a, 100 * 2 * (NODES[-1] - 1) * a / th, th))
    if 2 * (p - 1) * a > 0.5 * tf:
        say("The latency term dominates at scale: Flotilla would need an allreduce whose latency "
            "grows with log p (recursive halving-doubling, or a tree / double binary tree between "
            "node leaders) to go there - not built in this issue.")
    text = "\n".join(out)
    print(text)
    if table:
        open(table, "w").write(text + "\n")
    if png:
        dat = png + ".dat"
        with open(dat, "w") as f:
            for lg in LINKS_GBIT:
                f.write("# %d Gbit/s: nodes flat_busbw hier_busbw\n" % lg)
                for n, fb, hb in plot[lg]:
                    f.write("%d %.4f %.4f\n" % (n, fb, hb))
                f.write("\n\n")
        gp = ("set terminal pngcairo size 900,560 noenhanced\nset output '%s'\n"
              "set logscale x 2\nset logscale y 10\nset xlabel 'nodes (8 ranks each)'\nset ylabel 'bus bandwidth (GB/s)'\n"
              "set title 'Allreduce of 102.4 MB (25.6 M fp32), alpha-beta model fitted on netns'\n"
              "set key outside right\nset grid\n"
              "plot '%s' index 0 u 1:2 w lp t 'flat ring 100G', '' index 0 u 1:3 w lp t 'hierarchical 100G',"
              " '' index 1 u 1:2 w lp t 'flat ring 400G', '' index 1 u 1:3 w lp t 'hierarchical 400G'\n"
              % (png, dat))
        try:
            subprocess.run(["gnuplot"], input=gp.encode(), check=True)
            print("plot:", png)
        except (OSError, subprocess.CalledProcessError) as ex:
            print("allreduce_model: gnuplot failed:", ex)
        finally:
            os.unlink(dat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
