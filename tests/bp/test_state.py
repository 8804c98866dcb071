"""BP state as data: messages handed back continue BP (PGMax's BPState), so T steps in pieces are T
steps, and a convergence study over T steps costs T steps."""
import pytest
import torch
from conftest import random_graph

from gbpn import BeliefPropagation


@pytest.mark.parametrize("damping", [0.0, 0.4])
@pytest.mark.parametrize("grad", [False, True])
def test_steps_continued_from_returned_messages_equal_one_run(damping, grad):
    n, c = 40, 4
    ei = random_graph(n, 0.15, seed=1)
    g = torch.Generator().manual_seed(0)
    layer = BeliefPropagation(c, num_steps=7, damping=damping, kernel="eager").double()
    with torch.no_grad():
        layer.coupling.weight.copy_(torch.randn(c, c, generator=g))
    phi = torch.randn(n, c, generator=g, dtype=torch.float64)
    kw = dict(known_labels=torch.randint(0, c, (n,), generator=g), known_mask=torch.rand(n, generator=g) < 0.3)
    with torch.set_grad_enabled(grad):
        want, want_msg = layer(phi, ei, **kw, return_messages=True)
        msg = None
        for steps in (3, 1, 3):
            got, msg = layer(phi, ei, **kw, num_steps=steps, messages=msg, return_messages=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(msg, want_msg, rtol=0, atol=1e-12)
    auto = BeliefPropagation(c, num_steps=7, damping=damping).double()
    auto.load_state_dict(layer.state_dict())
    with torch.no_grad():  # continuing runs on the eager path whatever the kernel, and says so
        auto(phi, ei, **kw, num_steps=2, messages=msg)
    assert auto.last_backend == "eager"


def test_messages_of_the_wrong_shape_are_refused():
    layer = BeliefPropagation(3)
    ei = random_graph(10, 0.4, seed=0)
    with pytest.raises(ValueError, match=r"messages must be \[E, c\]"):
        layer(torch.randn(10, 3), ei, messages=torch.zeros(ei.size(1), 2))


def test_convergence_costs_t_steps_and_matches_runs_from_scratch():
    from torch_geometric.data import Data

    from gbpn import GBPN
    from gbpn.experiments.convergence import belief_steps
    from gbpn.train.fit import predict

    n = 50
    ei = random_graph(n, 0.12, seed=3)
    torch.manual_seed(0)
    data = Data(x=torch.randn(n, 6, dtype=torch.float64), edge_index=ei, y=torch.randint(0, 3, (n,)))
    model = GBPN(6, 3, hidden_channels=8, num_steps=2).double()
    known = torch.rand(n) < 0.3
    calls = []
    model.bp.register_forward_hook(lambda mod, args, kwargs, out: calls.append(kwargs.get("num_steps")),
                                   with_kwargs=True)
    got = belief_steps(model, data, known, 6)
    assert sum(calls) == 6  # one step per call after t = 0: T steps in all, not T^2 / 2
    for t in (0, 1, 4, 6):
        torch.testing.assert_close(got[t], predict(model, data, known, num_steps=t), rtol=0, atol=1e-10)
