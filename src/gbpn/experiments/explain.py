"""Why did the model predict this class for this node? A per-neighbour account.

After BP, :math:`\\log p_i(y) = \\log\\phi_i(y) + \\sum_{j \\in N(i)} \\log m_{j\\to i}(y) - \\log Z_i`.
For the predicted class :math:`\\hat y` and the runner-up :math:`y'`, the margin
:math:`\\log p_i(\\hat y) - \\log p_i(y')` therefore splits exactly into the node's own
evidence :math:`\\log\\phi_i(\\hat y) - \\log\\phi_i(y')` plus one term per neighbour,
:math:`\\log m_{j\\to i}(\\hat y) - \\log m_{j\\to i}(y')`. Neighbours are ranked by that term:
positive ones pushed the node toward its prediction, negative ones away from it.

A *clamped* node (its label is known evidence) is different: BP holds its belief at the one-hot
of its label, so its log-odds are the clamp (about :math:`10^4`), not a sum of parts. For such a
node the explanation reports what its own features and its neighbours' final messages say
without the clamp, :math:`\\log\\phi_i + \\sum_j \\log m_{j\\to i}`, split the same way and
exactly, and the runner-up is the best other class by that sum.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data

from gbpn.errors import GBPNError
from gbpn.models.gbpn import GBPN
from gbpn.data.features import prepare_features


@torch.no_grad()
def explain_node(model: GBPN, data: Data, node: int, known_mask: Optional[Tensor] = None,
                 class_names: Optional[Sequence[str]] = None) -> Dict:
    """Self-potential, final belief and every neighbour's message contribution for ``node``."""
    if getattr(model, "motifs", "none") != "none":
        raise GBPNError("gbpn explain splits a belief into pairwise messages; a triangle model (--motifs triangle) "
                        "also holds triangle messages, which it does not report yet")
    n = data.num_nodes
    if not 0 <= node < n:
        raise GBPNError(f"node must be in 0..{n - 1}, got {node}")
    model.eval()
    x = prepare_features(data.x)
    log_self = model.self_potential(x, data.edge_index)
    known_labels = data.y if known_mask is not None else None
    log_b, log_m = model.bp(log_self, data.edge_index, getattr(data, "edge_weight", None),
                            rev_index=getattr(data, "rev_index", None), known_labels=known_labels,
                            known_mask=known_mask, return_messages=True)
    c = log_b.size(1)
    names = list(class_names) if class_names and len(class_names) == c else [str(k) for k in range(c)]
    incoming = (data.edge_index[1] == node).nonzero().view(-1)
    clamped = known_mask is not None and bool(known_mask[node])
    # own evidence plus every incoming message: log_b[node] up to a constant, unless the node is clamped
    evidence = log_self[node] + log_m.index_select(0, incoming).sum(0)
    pred = int(log_b[node].argmax())
    others = evidence.clone()
    others[pred] = -float("inf")
    runner = int(others.argmax()) if c > 1 else pred
    nbrs: List[Dict] = []
    for e in incoming.tolist():  # one node's neighbours: a report, not a hot path
        j = int(data.edge_index[0, e])
        msg = log_m[e]
        nbrs.append({
            "neighbour": j,
            "contribution": float(msg[pred] - msg[runner]),
            "message": [float(v) for v in msg.exp()],
            "neighbour_known": bool(known_mask[j]) if known_mask is not None else False,
            "neighbour_label": names[int(data.y[j])] if known_mask is not None and bool(known_mask[j]) else None,
            "neighbour_prediction": names[int(log_b[j].argmax())],
        })
    nbrs.sort(key=lambda r: -r["contribution"])
    return {
        "node": node,
        "prediction": names[pred],
        "runner_up": names[runner],
        "known": clamped,
        "potential": getattr(model, "potential", "mlp"),
        "self_potential": [float(v) for v in log_self[node].exp()],
        "belief": [float(v) for v in log_b[node].exp()],
        "self_contribution": float(log_self[node, pred] - log_self[node, runner]),
        "margin": float(log_b[node, pred] - log_b[node, runner]),
        "evidence_margin": float(evidence[pred] - evidence[runner]),
        "class_names": names,
        "neighbours": nbrs,
    }


def format_explanation(ex: Dict, top: int = 10) -> str:
    names = ex["class_names"]
    fmt = lambda p: ", ".join(f"{n}: {v:.3f}" for n, v in zip(names, p))  # noqa: E731
    # the self-potential is the encoder's output: own features for the paper's MLP, the
    # node's neighbourhood features too for the graph encoders, its neighbours' identities for LINKX
    potential = ex.get("potential", "mlp")
    own = {"mlp": "own features",
           "linkx": "linkx encoder on own features and which nodes it links to"}.get(
        potential, f"{potential} encoder on the neighbourhood's features")
    split, label = ex.get("split"), ex.get("label")  # what gbpn.api.explain adds: the checkpoint's split, y
    what = ", ".join(([f"{split} split"] if split and split != "unlabelled" else [])
                     + ([f"true label {label}"] if label is not None else ["unlabelled"] if split else []))
    lines = [
        f"node {ex['node']}" + (f" ({what})" if what else "") + f": predicted {ex['prediction']} "
        f"(runner-up {ex['runner_up']})"
        + ("  [label known: clamped evidence]" if ex["known"] else ""),
        f"  {own} (self-potential): {fmt(ex['self_potential'])}",
        f"  final belief after BP:         {fmt(ex['belief'])}",
    ]
    parts = (f"{own} {ex['self_contribution']:+.3f} + {len(ex['neighbours'])} neighbour message(s) "
             f"{sum(r['contribution'] for r in ex['neighbours']):+.3f}")
    if ex["known"]:
        lines += ["  BP holds a known node at its label, so its belief is the clamp, not a sum of parts. Without "
                  "the clamp,", f"  log-odds {ex['prediction']} vs {ex['runner_up']}: "
                  f"{ex['evidence_margin']:+.3f} = {parts}"]
    else:
        lines.append(f"  log-odds {ex['prediction']} vs {ex['runner_up']}: {ex['margin']:+.3f} = {parts}")
    if ex["neighbours"]:
        lines.append(f"  neighbours ranked by push toward {ex['prediction']} (top {min(top, len(ex['neighbours']))}):")
        for r in ex["neighbours"][:top]:
            tag = f"known label {r['neighbour_label']}" if r["neighbour_known"] else f"predicted {r['neighbour_prediction']}"
            lines.append(f"    node {r['neighbour']:>7} ({tag}): {r['contribution']:+.3f}")
    return "\n".join(lines)
