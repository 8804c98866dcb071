"""One BP step on a large synthetic graph: our kernel vs the plain E x c x c form vs one PyG GCNConv.

A "BP step" is the message update on every directed edge (cavity, product with H,
normalisation) plus the aggregation into beliefs, forward only; GCNConv(c, c) is one forward
with its normalisation cached. Each (operation, c) runs in its own process; peak memory is the
process's peak RSS growth over what the graph itself needs (VmHWM reset after set-up).
These machines are noisy: with ``--rounds R`` every process runs R times, in alternating order,
and a ratio is the median of its R per-round ratios (the two processes ran minutes apart at most).

    python benchmarks/bp_step.py --nodes 169343 --edges 1166243 --classes 2 7 40 47

"BP" is what ``BeliefPropagation`` runs at inference, the fused numba kernel (``kernel="fused"``,
gbpn.bp.backends.cpu_fused), "eager" the same layer with ``kernel="eager"`` (paired edge layout, linear-domain
messages), measured in the same run: its step time is (t(K = 3) - t(K = 1)) / 2 over whole forward calls, so set-up
cancels, and its memory the peak of the K = 3 call, message buffers included.
"log" is the log-domain step that training back-propagates through (cavity with a reverse
gather, normalized_message, aggregate), timed on its own; its memory counts temporaries only.

The plain form needs E*c*c floats (20 GB at arXiv size and c = 47): with --plain-edge-fraction
it runs on that fraction of the edges and its time and memory are scaled up linearly, which
the table marks with '~'.

On a graph this large the fused layout renumbers the nodes (reverse Cuthill-McKee,
``gbpn.graph.layouts.locality_order``); ``--order`` adds the fused step with the graph's own
numbering ("given") and GCNConv on the renumbered graph ("GCNrcm"), so that the renumbering's
share of the BP/GCN ratio is measured in the same run.

``--keep-messages`` adds the training step with ``gbpn.bp.backends.cpu_fused.KEEP_MESSAGES_FRACTION`` = 0.25
(opt-in: from 8 classes on the forward keeps every step's messages and the backward reads them
instead of recomputing them), with both training processes' whole peak resident memory in MB.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def rss_kb(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmHWM: its peak RSS), in kB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def reset_peak(cuda: bool) -> float:
    """Start a peak-memory measurement: reset the peak counter (CUDA's allocations, else the process's peak
    RSS) and return what is held now, in kB (the set-up, left out of the peak)."""
    import torch

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 1024
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset the peak-RSS counter: measure the step, not the set-up
    return rss_kb("VmRSS")


def peak_kb(cuda: bool) -> float:
    """The peak since :func:`reset_peak` (CUDA's allocations, else the process's VmHWM), in kB."""
    import torch

    return torch.cuda.max_memory_allocated() / 1024 if cuda else rss_kb("VmHWM")


def child(op: str, nodes: int, edges: int, c: int, reps: int, fraction: float, threads: int,
          device: str = "cpu") -> dict:
    import torch

    torch.set_num_threads(threads)
    cuda = device.startswith("cuda")
    op, n, ei, rev = _graph(op, nodes, edges, c, fraction)
    e = ei.size(1)
    run = _operation(op, n, c, ei, rev, device)
    run()  # warm-up
    base = reset_peak(cuda)  # GPU memory: peak allocation over what is allocated before the timed calls

    def median_time(fn) -> float:
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    if op in ("bp", "eager"):
        seconds = (median_time(lambda: run(3)) - median_time(lambda: run(1))) / 2
    else:
        seconds = median_time(run)
    peak = peak_kb(cuda) - base
    scale = 1 / fraction if op == "plain" else 1.0
    # the process's whole peak (graph, inputs and buffers held across calls, such as the fused kernels' pool)
    total = peak_kb(cuda)
    return {"seconds": seconds * scale, "peak_mb": peak / 1024 * scale, "total_mb": total / 1024, "edges": e}


def _graph(op: str, nodes: int, edges: int, c: int, fraction: float):
    """(the operation without its suffix, N, edge_index, reverse index) of the DC-SBM graph; the suffixes
    ``-given`` and ``-keep`` set the fused kernels' options, ``gcn-rcm`` renumbers the graph, and the plain
    form keeps ``fraction`` of the edges."""
    from gbpn.data.generators import planted_partition_graph

    data = planted_partition_graph(nodes, edges, 8, c, seed=0)
    ei, rev = data.edge_index, data.rev_index
    if op.endswith("-given"):  # the fused layout keeps the graph's node numbering
        import gbpn.graph.layouts as layouts

        layouts.REORDER_MIN_NODES = data.num_nodes + 1
        op = op[:-len("-given")]
    if op.endswith("-keep"):  # the forward keeps every step's messages; the backward reads them
        import gbpn.bp.backends.cpu_fused as fused

        fused.KEEP_MESSAGES_FRACTION = 0.25
        op = op[:-len("-keep")]
    if op == "gcn-rcm":  # GCNConv on the graph renumbered by the fused layout itself
        from gbpn.graph.layouts import csr_layout

        ei, op = csr_layout(ei, rev, data.num_nodes, reorder=True).rank[ei], "gcn"
    if op == "plain" and fraction < 1:
        keep = int(ei.size(1) * fraction)
        ei, rev = ei[:, :keep], None
    return op, data.num_nodes, ei, rev


def _operation(op: str, n: int, c: int, ei, rev, device: str):
    """The call ``op`` times, on seeded inputs (beliefs, messages and a symmetric log H)."""
    import torch

    from gbpn.bp.functional import aggregate, cavity, log_matmul_exp_dense, log_normalize, normalized_message

    e = ei.size(1)
    g = torch.Generator().manual_seed(0)
    log_self = torch.log_softmax(torch.randn(n, c, generator=g), -1)
    log_msg = torch.log_softmax(torch.randn(e, c, generator=g), -1)
    log_H = torch.randn(c, c, generator=g)
    log_H = 0.5 * (log_H + log_H.T)
    if rev is None:
        rev = torch.arange(e)  # the plain form's memory and time do not depend on which reverse it reads
    ei, rev, log_self, log_msg, log_H = (t.to(device) for t in (ei, rev, log_self, log_msg, log_H))
    src, dst = ei[0], ei[1]
    log_belief = aggregate(log_self, log_msg, dst)
    if op == "gcn":
        from torch_geometric.nn import GCNConv

        conv = GCNConv(c, c, cached=True).to(device)
        x = torch.randn(n, c, generator=g).to(device)
        with torch.no_grad():
            conv(x, ei)  # fills the normalisation cache

        def run():
            with torch.no_grad():
                return conv(x, ei)
    elif op in ("bp", "eager"):
        from gbpn.bp.layer import BeliefPropagation

        layer = BeliefPropagation(c, learn_coupling=False, coupling_init=log_H.exp().cpu(),
                                  kernel="fused" if op == "bp" else "eager").to(device)

        def run(k=1):
            with torch.no_grad():
                return layer(log_self, ei, rev_index=rev, num_steps=k)
    elif op in ("train-fused", "train-eager"):  # forward + backward of K = 5 steps, learnable coupling
        from gbpn.bp.layer import BeliefPropagation

        layer = BeliefPropagation(c, coupling_init=log_H.exp().cpu(), kernel=op[6:]).to(device)
        x = log_self.clone().requires_grad_()
        weight = torch.randn(n, c, generator=g).to(device)

        def run():
            (layer(x, ei, rev_index=rev, num_steps=5) * weight).sum().backward()
    elif op == "gcn2-train":  # two GCNConv(c, c) layers, forward + backward
        from torch_geometric.nn import GCNConv

        convs = [GCNConv(c, c, cached=True).to(device) for _ in range(2)]
        x = torch.randn(n, c, generator=g).to(device).requires_grad_()
        weight = torch.randn(n, c, generator=g).to(device)

        def run():
            (convs[1](torch.relu(convs[0](x, ei)), ei) * weight).sum().backward()
    else:
        def run():
            with torch.no_grad():
                v = cavity(log_belief, log_msg, src, rev)
                if op == "log":
                    m = normalized_message(v, log_H)
                else:
                    m = log_normalize(log_matmul_exp_dense(v, log_H))
                return aggregate(log_self, m, dst)
    return run


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=169_343)
    ap.add_argument("--edges", type=int, default=1_166_243, help="undirected edges to sample")
    ap.add_argument("--classes", type=int, nargs="+", default=[2, 7, 40, 47])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every (operation, c) this many times, alternating their order; print medians, and for "
                         "ratios the median of the per-round ratios")
    ap.add_argument("--plain-edge-fraction", type=float, default=0.1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (GPU memory: peak allocated bytes)")
    ap.add_argument("--train", action="store_true",
                    help="also time forward + backward of K = 5 steps (fused and eager) against a two-layer GCN")
    ap.add_argument("--order", action="store_true",
                    help="also time the fused steps with the graph's own node numbering (the layout renumbers the "
                         "nodes of large graphs, gbpn.graph.layouts.locality_order) and GCNConv on the renumbered graph")
    ap.add_argument("--fused-only", action="store_true",
                    help="time only the fused step, GCNConv and (with --train) their training steps: no eager, "
                         "log-domain or plain columns")
    ap.add_argument("--keep-messages", action="store_true",
                    help="with --train: also time the fused training step whose forward keeps every step's messages "
                         "for the backward (opt-in, from 8 classes on), and both training steps' memory")
    ap.add_argument("--child", nargs=2, metavar=("OP", "C"), help=argparse.SUPPRESS)
    return ap


def _ops(args: argparse.Namespace) -> tuple:
    ops = ("bp", "gcn") + (() if args.fused_only else ("eager", "log", "plain"))
    if args.train:
        ops += ("train-fused", "gcn2-train") + (() if args.fused_only else ("train-eager",))
    if args.order:
        ops += ("bp-given", "gcn-rcm") + (("train-fused-given",) if args.train else ())
    if args.keep_messages and args.train:
        ops += ("train-fused-keep",)
    return ops


def _columns(u: float, unit: str, plain_mark: str) -> list:
    """(header, needed op, cell): a column is printed when its op ran."""
    def sec(op):
        return lambda r, c: f"{u * r[op]['seconds']:.3f}"

    def ratio(a, b, digits=2):  # over --rounds: the median of the per-round ratios (paired in time)
        return lambda r, c: f"{statistics.median(x / y for x, y in zip(r[a]['runs'], r[b]['runs'])):.{digits}f}"

    def mb(op):
        return lambda r, c: f"{r[op]['peak_mb']:.0f}"

    return [
        ("BP " + unit, "bp", sec("bp")), ("GCNConv " + unit, "gcn", sec("gcn")), ("BP/GCN", "gcn", ratio("bp", "gcn")),
        ("eager " + unit, "eager", sec("eager")), ("eager/BP", "eager", ratio("eager", "bp")),
        ("log " + unit, "log", sec("log")), ("log/GCN", "log", ratio("log", "gcn")),
        ("plain " + unit, "plain", lambda r, c: (plain_mark if c >= 20 else "") + sec("plain")(r, c)),
        ("plain/BP", "plain", ratio("plain", "bp", 1)),
        ("BP MB", "bp", mb("bp")), ("log MB", "log", mb("log")), ("GCN MB", "gcn", mb("gcn")),
        ("plain MB", "plain", lambda r, c: (plain_mark if c >= 20 else "") + mb("plain")(r, c)),
        # a step that reuses its buffers allocates under 1 MB: no meaningful ratio
        ("plain/BP mem", "plain", lambda r, c: f"{r['plain']['peak_mb'] / r['bp']['peak_mb']:.1f}"
         if r["bp"]["peak_mb"] >= 1 else "-"),
        ("train " + unit, "train-fused", sec("train-fused")), ("eager tr", "train-eager", sec("train-eager")),
        ("GCN2 tr", "gcn2-train", sec("gcn2-train")), ("train/GCN2", "gcn2-train", ratio("train-fused", "gcn2-train")),
        ("eager/train", "train-eager", ratio("train-eager", "train-fused")),
        ("given " + unit, "bp-given", sec("bp-given")), ("given/BP", "bp-given", ratio("bp-given", "bp")),
        ("GCNrcm " + unit, "gcn-rcm", sec("gcn-rcm")), ("BP/GCNrcm", "gcn-rcm", ratio("bp", "gcn-rcm")),
        ("given tr", "train-fused-given", sec("train-fused-given")),
        ("given/tr", "train-fused-given", ratio("train-fused-given", "train-fused")),
        ("keep tr", "train-fused-keep", sec("train-fused-keep")),
        ("keep/tr", "train-fused-keep", ratio("train-fused-keep", "train-fused")),
        # whole-process peaks: the step's buffers stay mapped between calls, so its growth alone hides them
        ("train peak", "train-fused-keep", lambda r, c: f"{r['train-fused']['total_mb']:.0f}"),
        ("keep peak", "train-fused-keep", lambda r, c: f"{r['train-fused-keep']['total_mb']:.0f}"),
    ]


def _cell(args: argparse.Namespace, ops: tuple, c: int) -> dict:
    """op -> the medians over the rounds of its child's figures, and ``runs``: its seconds round by round."""
    rounds = {op: [] for op in ops}
    for rnd in range(args.rounds):  # alternate the order, so that a drift of the machine's speed cancels
        for op in (ops if rnd % 2 == 0 else ops[::-1]):
            cmd = [sys.executable, __file__, "--child", op, str(c), "--nodes", str(args.nodes), "--edges",
                   str(args.edges), "--reps", str(args.reps), "--threads", str(args.threads),
                   "--plain-edge-fraction", str(args.plain_edge_fraction), "--device", args.device]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            rounds[op].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {op: {**{key: statistics.median(x[key] for x in got) for key in got[0]},
                 "runs": [x["seconds"] for x in got]} for op, got in rounds.items()}


def main() -> None:
    ap = _parser()
    args = ap.parse_args()
    if args.train and args.device != "cpu":
        ap.error("--train times the fused CPU backward; on CUDA training runs the eager path (no Triton backward)")
    if args.child:
        op, c = args.child[0], int(args.child[1])
        frac = args.plain_edge_fraction if c >= 20 else 1.0
        print(json.dumps(child(op, args.nodes, args.edges, c, args.reps, frac, args.threads, args.device)))
        return
    where = args.device if args.device != "cpu" else f"{args.threads} CPU thread(s)"
    print(f"graph: {args.nodes} nodes, {args.edges} sampled undirected edges; {where}; median of {args.reps}"
          + (f"; {args.rounds} rounds" if args.rounds > 1 else ""))
    u, unit = (1000.0, "ms") if args.device != "cpu" else (1.0, "s")  # GPU steps take well under a millisecond
    ops = _ops(args)
    plain_mark = "~" if args.plain_edge_fraction < 1 else ""  # the plain form is timed on a fraction of the edges
    columns = [col for col in _columns(u, unit, plain_mark) if col[1] in ops]
    widths = [max(8, len(name)) for name, _, _ in columns]
    print(f"{'c':>3} " + " ".join(f"{name:>{w}}" for (name, _, _), w in zip(columns, widths)))
    for c in args.classes:
        res = _cell(args, ops, c)
        print(f"{c:>3} " + " ".join(f"{cell(res, c):>{w}}" for (_, _, cell), w in zip(columns, widths)), flush=True)


if __name__ == "__main__":
    main()
