"""Peak memory and time of one BP training step: implicit differentiation vs unrolled BP.

One training step is the BP layer's forward and backward on a large DC-SBM graph
(``gbpn.data.generators.planted_partition_graph``, arXiv-sized by default) with the planted
labels: noisy self-potentials that require a gradient, a learnable homophilous coupling,
15% of the nodes clamped to their label and the marginal NLL of another 15% as the loss
(the shape of a transductive GBPN step, without the MLP).

    python benchmarks/implicit_step.py --nodes 169343 --edges 1166243 --classes 40

Cells, each in its own process (peak memory: the growth of the process's peak RSS over what the
set-up holds, VmHWM reset after set-up; on CUDA the peak allocated bytes over those allocated):

- ``implicit``: ``backward="implicit"``, BP to a belief change below ``--tol`` (at most
  ``--max-steps``), adjoint by fixed-point iteration (:mod:`gbpn.bp.implicit`);
- ``unroll K=5``: the default training step, back-propagating through 5 steps;
- ``unroll K=N``: unrolled through as many steps N as the implicit forward took. When its
  predicted memory exceeds ``--max-gb`` it is not run: its peak is extrapolated linearly from the
  measured K = 1 and K = 3 cells (memory is linear in K), marked '~', and the extrapolation is
  checked against the measured K = 5.

Every cell runs twice: with the layer's own kernel choice (``kernel="auto"``: the fused
kernels of :mod:`gbpn.bp.backends.cpu_fused` where they apply; unrolled, they keep about 1.1 ``[E, c]`` buffers
per step, implicit the fixed point and two gradient buffers) and with ``kernel="eager"`` (the
reference path: unrolled, the autograd graph, about 3 per step; implicit, the VJPs of
:mod:`gbpn.bp.implicit`).

Times: wall seconds of the step and the process's CPU seconds (less sensitive to other jobs
sharing the cores).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bp_step import peak_kb, reset_peak  # a sibling script: python benchmarks/<this>.py puts benchmarks/ on the path


def child(mode: str, steps: int, nodes: int, edges: int, c: int, beta: float, noise: float, tol: float,
          threads: int, device: str) -> dict:
    import torch

    torch.set_num_threads(threads)
    cuda = device.startswith("cuda")
    from gbpn.data.generators import planted_partition_graph
    from gbpn.bp.layer import BeliefPropagation
    from gbpn.bp.implicit import ImplicitStats

    data = planted_partition_graph(nodes, edges, 8, c, seed=0)
    n, y = data.num_nodes, data.y
    g = torch.Generator().manual_seed(0)
    # weakly informative potentials: the planted class gets +1 over Gaussian noise
    logits = torch.nn.functional.one_hot(y, c).float() + noise * torch.randn(n, c, generator=g)
    log_self = torch.log_softmax(logits, -1).to(device).requires_grad_()
    order = torch.randperm(n, generator=g)
    known = torch.zeros(n, dtype=torch.bool)
    known[order[: int(0.15 * n)]] = True
    target = order[int(0.15 * n): int(0.3 * n)].to(device)
    H = torch.ones(c, c) + (beta - 1.0) * torch.eye(c)
    backward, _, kernel = mode.partition("-")
    layer = BeliefPropagation(c, num_steps=steps, backward=backward, tol=tol if backward == "implicit" else None,
                              coupling_init=H, kernel=kernel or "auto").to(device)
    ei, rev, y, known = data.edge_index.to(device), data.rev_index.to(device), y.to(device), known.to(device)
    del data
    # compile the kernels (numba's JIT holds tens of MB) on a 3-node path before measuring
    tiny = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]], device=device)
    phi = torch.zeros(3, c, device=device, requires_grad=True)
    layer(phi, tiny, known_labels=torch.zeros(3, dtype=torch.long, device=device),
          known_mask=torch.tensor([True, False, False], device=device)).sum().backward()
    layer.implicit_stats = ImplicitStats()
    layer.zero_grad()

    base = reset_peak(cuda)
    t, cpu = time.perf_counter(), time.process_time()
    out = layer(log_self, ei, rev_index=rev, known_labels=y, known_mask=known)
    loss = torch.nn.functional.nll_loss(out[target], y[target])
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    peak = peak_kb(cuda) - base
    grads = torch.cat([log_self.grad.flatten(), layer.coupling.weight.grad.flatten()])
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_mb": peak / 1024, "edges": int(ei.size(1)),
            "finite": bool(torch.isfinite(grads).all()), "kernel": layer.last_backend,
            **layer.implicit_stats.summary()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=169_343)
    ap.add_argument("--edges", type=int, default=1_166_243, help="undirected edges to sample")
    ap.add_argument("--classes", type=int, nargs="+", default=[40])
    ap.add_argument("--beta", type=float, default=4.0, help="coupling H = 1 + (beta - 1) I (default: 4)")
    ap.add_argument("--noise", type=float, default=1.0, help="std of the self-potentials' noise (default: 1)")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--max-gb", type=float, default=16.0,
                    help="run unrolled K = N only when its predicted peak is below this (default: 16)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (GPU memory: peak allocated bytes)")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "STEPS", "C"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, steps, c = args.child[0], int(args.child[1]), int(args.child[2])
        print(json.dumps(child(mode, steps, args.nodes, args.edges, c, args.beta, args.noise, args.tol,
                               args.threads, args.device)))
        return

    def cell(mode: str, steps: int, c: int) -> dict:
        cmd = [sys.executable, __file__, "--child", mode, str(steps), str(c), "--nodes", str(args.nodes),
               "--edges", str(args.edges), "--beta", str(args.beta), "--noise", str(args.noise),
               "--tol", str(args.tol), "--threads", str(args.threads), "--device", args.device]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    where = args.device if args.device != "cpu" else f"{args.threads} CPU thread(s)"
    print(f"graph: {args.nodes} nodes, {args.edges} sampled undirected edges; {where}; H = 1 + {args.beta - 1:g} I, "
          f"one forward + backward each")
    for c in args.classes:
        rows, implicit = [], []
        for mode in ("implicit", "implicit-eager"):
            imp = cell(mode, args.max_steps, c)
            n = round(imp["forward_steps_mean"])
            print(f"c = {c}, {imp['edges']} directed edges, {mode} ({imp['kernel']}): forward {n} steps "
                  f"(converged: {imp['forward_converged_frac']:.0%}), adjoint {imp['adjoint_steps_mean']:.0f} steps "
                  f"(converged: {imp['adjoint_converged_frac']:.0%}), gradients finite: {imp['finite']}", flush=True)
            implicit.append((f"{mode} ({imp['kernel']}) tol {args.tol:g}", imp))
            rows.append((implicit[-1][0], imp, ""))
        n = round(implicit[0][1]["forward_steps_mean"])
        for mode in ("unroll", "unroll-eager"):
            k1, k3, k5 = (cell(mode, k, c) for k in (1, 3, 5))
            per_step = (k3["peak_mb"] - k1["peak_mb"]) / 2
            predicted = k1["peak_mb"] + (n - 1) * per_step
            if predicted <= 1024 * args.max_gb:
                kn, mark = cell(mode, n, c), ""
            else:
                kn, mark = {"peak_mb": predicted, "seconds": float("nan"), "cpu_seconds": float("nan")}, "~"
            name = f"{mode} ({k5['kernel']})"
            print(f"  {name}: linear memory model from K = 1, 3: {per_step:.0f} MB per unrolled step; K = 5 predicted "
                  f"{k1['peak_mb'] + 4 * per_step:.0f} MB, measured {k5['peak_mb']:.0f} MB", flush=True)
            rows += [(f"{name} K=5", k5, ""), (f"{name} K={n}", kn, mark)]
            for iname, imp in implicit:
                print(f"  {iname} / {name} K=5 memory: {imp['peak_mb'] / k5['peak_mb']:.2f}; "
                      f"{name} K={n} / {iname} memory: {mark}{kn['peak_mb'] / imp['peak_mb']:.1f}x", flush=True)
        print(f"  {'cell':<36} {'peak MB':>9} {'s/step':>8} {'CPU s/step':>11}")
        for name, r, m in rows:
            print(f"  {name:<36} {m + format(r['peak_mb'], '.0f'):>9} {r['seconds']:>8.1f} {r['cpu_seconds']:>11.1f}")


if __name__ == "__main__":
    main()
