"""The BP layer refuses inputs it would turn into wrong beliefs (issue 12, item 7) and keeps the
caller's precision (item 8); property tests draw random bad potentials, masks and edge lists."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gbpn import GBPN, BeliefPropagation
from gbpn.bp.functional import log_normalize
from gbpn.graph.reverse import reverse_edge_index
from gbpn.bp.validation import unchecked

from conftest import FUSED_SKIP, brute_force_marginals, undirected

RING = undirected([(0, 1), (1, 2), (2, 3), (3, 0), (3, 4)])


def _layer(c=3, steps=4):
    torch.manual_seed(0)
    layer = BeliefPropagation(c, num_steps=steps)
    with torch.no_grad():
        layer.coupling.weight.copy_(torch.randn(c, c))
    return layer


# item 7 -----------------------------------------------------------------------------------------

def test_self_loop_is_refused():
    ei = torch.cat([RING, torch.tensor([[2], [2]])], 1)
    with pytest.raises(ValueError, match=r"self-loop \(2, 2\)"):
        _layer()(torch.randn(5, 3), ei)


def test_integer_known_mask_is_refused():
    labels = torch.tensor([0, 1, 2, 0, 1])
    with pytest.raises(ValueError, match="known_mask must be a bool"):
        _layer()(torch.randn(5, 3), RING, known_labels=labels, known_mask=torch.tensor([0, 1, 0, 0, 0]))


def test_labels_without_a_mask_are_refused_not_ignored():
    labels = torch.tensor([0, 1, 2, 0, 1])
    layer = _layer()
    with pytest.raises(ValueError, match="known_labels given without known_mask"):
        layer(torch.randn(5, 3), RING, known_labels=labels)
    with pytest.raises(ValueError, match="known_labels given without known_mask"):
        layer.infer_pairs(torch.randn(5, 3), RING[:, RING[0] < RING[1]], known_labels=labels)


def test_nan_or_inf_potential_row_is_refused_but_log_zero_is_fine():
    log_self = torch.randn(5, 3)
    for bad in (float("nan"), float("inf")):
        x = log_self.clone()
        x[2, 1] = bad
        with pytest.raises(ValueError, match=r"row\(s\) \[2\]"):
            _layer()(x, RING)
    x = log_self.clone()
    x[2, 1] = -float("inf")  # log 0: class 1 impossible at node 2
    out = _layer()(x, RING)
    assert torch.isfinite(out[[0, 1, 3, 4]]).all() and out[2, 1].exp() == 0


def test_infer_pairs_refuses_both_directions():
    layer = _layer()
    with pytest.raises(ValueError, match="each undirected edge once"):
        layer.infer_pairs(torch.randn(5, 3), RING)
    pairs = RING[:, RING[0] < RING[1]]
    expect = layer(log_normalize(torch.randn(5, 3).double()), RING)  # smoke: the right input runs
    assert layer.infer_pairs(torch.randn(5, 3), pairs).shape == expect.shape


def test_unchecked_skips_the_checks():
    ei = torch.cat([RING, torch.tensor([[2], [2]])], 1)
    with unchecked():
        _layer()(torch.randn(5, 3), ei)  # the caller vouches for the input


@st.composite
def _valid_inputs(draw):
    n = draw(st.integers(2, 7))
    c = draw(st.integers(2, 4))
    pairs = sorted({(min(i, j), max(i, j)) for i, j in draw(st.lists(
        st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda t: t[0] != t[1]), max_size=12))})
    ei = undirected(pairs) if pairs else torch.zeros(2, 0, dtype=torch.long)
    log_self = torch.tensor(draw(st.lists(st.lists(st.floats(-20, 20), min_size=c, max_size=c),
                                          min_size=n, max_size=n)), dtype=torch.float64)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    labels = torch.tensor(draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)))
    return log_self, ei, mask, labels, c


def _corrupt(draw, log_self, ei, mask, labels, c):
    """One randomly chosen way to make the input invalid; returns the kwargs and the message expected."""
    n = log_self.size(0)
    kind = draw(st.sampled_from(["nan", "inf", "all-neg-inf", "int-mask", "short-mask", "label", "loop",
                                 "out-of-range", "float-index", "rev"]))
    args = dict(log_self=log_self.clone(), edge_index=ei, known_labels=labels, known_mask=mask)
    row = draw(st.integers(0, n - 1))
    if kind in ("nan", "inf"):
        args["log_self"][row, draw(st.integers(0, c - 1))] = float(kind)
        return args, "log_self has NaN"
    if kind == "all-neg-inf":
        args["log_self"][row] = -math.inf
        return args, "log_self has NaN"
    if kind == "int-mask":
        args["known_mask"] = mask.long()
        return args, "known_mask must be a bool"
    if kind == "short-mask":
        args["known_mask"] = mask[:-1]
        return args, "known_mask must be a bool"
    if kind == "label":
        args["known_mask"] = torch.ones(n, dtype=torch.bool)
        args["known_labels"] = labels.clone()
        args["known_labels"][row] = draw(st.sampled_from([-1, c, c + 3]))
        return args, "known_labels"
    if kind == "loop":
        args["edge_index"] = torch.cat([ei, torch.tensor([[row], [row]])], 1)
        return args, "self-loop"
    if kind == "out-of-range":
        args["edge_index"] = torch.cat([ei, torch.tensor([[row, n], [n, row]])], 1)
        return args, "outside"
    if kind == "float-index":
        args["edge_index"] = ei.double()
        return args, "integer tensor"
    # "rev": a reverse index shifted by one pairs every edge with a wrong one
    e = ei if ei.size(1) else undirected([(0, 1)])
    args["edge_index"], args["rev_index"] = e, reverse_edge_index(e, n).roll(1)
    return args, "rev_index"


@settings(max_examples=150, deadline=None)
@given(inputs=_valid_inputs(), data=st.data())
def test_bp_input_validation_property(inputs, data):
    """Valid random inputs give finite normalised beliefs; each random corruption is refused
    with a ValueError that names it, never a silent result."""
    log_self, ei, mask, labels, c = inputs
    layer = BeliefPropagation(c, num_steps=3).double()
    out = layer(log_self, ei, known_labels=labels, known_mask=mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.exp().sum(1), torch.ones(len(out), dtype=torch.float64))
    args, match = _corrupt(data.draw, log_self, ei, mask, labels, c)
    with pytest.raises(ValueError, match=match):
        layer(**args)


# item 8 -----------------------------------------------------------------------------------------

def test_double_model_keeps_float64_end_to_end():
    torch.manual_seed(0)
    model = GBPN(4, 3, hidden_channels=8, dropout=0.0).double().eval()
    x = torch.randn(5, 4, dtype=torch.float64)
    assert model.encoder(x).dtype == torch.float64 and model(x, RING).dtype == torch.float64
    bf16 = GBPN(4, 3, hidden_channels=8, precision="bf16").eval()
    assert bf16.encoder(x.float()).dtype == torch.float32  # bf16 hidden layers, float32 out


def test_float64_coupling_init_is_not_rounded_to_float32():
    H = torch.tensor([[1.0, 1e-3 + 1e-12], [1e-3 + 1e-12, 3.0]], dtype=torch.float64)
    layer = BeliefPropagation(2, coupling_init=H).double()
    torch.testing.assert_close(layer.log_H, H.log(), rtol=0, atol=1e-15)


def test_infer_pairs_computes_in_the_callers_precision():
    layer = _layer(3, steps=6).double()
    log_self = torch.randn(5, 3, dtype=torch.float64)
    pairs = RING[:, RING[0] < RING[1]]
    torch.testing.assert_close(layer.infer_pairs(log_self, pairs, message_dtype=torch.float64),
                               layer(log_self, RING), rtol=0, atol=1e-12)


def test_wide_coupling_is_refused_in_float32_and_exact_in_float64():
    """A log H spread of 88: float32 messages underflow and the beliefs were off by 0.05."""
    edges = [(0, 1)]
    log_H = torch.tensor([[0.0, -88.0], [-88.0, -86.0]], dtype=torch.float64)
    layer = BeliefPropagation(2, num_steps=2, coupling_init=log_H.exp())
    log_phi = torch.tensor([[0.0, 0.0], [0.0, 89.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="float64"):
        layer.float()(log_phi.float(), undirected(edges))
    out = layer.double()(log_phi, undirected(edges))
    torch.testing.assert_close(out.exp(), brute_force_marginals(2, edges, log_phi, log_H), rtol=0, atol=1e-9)


def test_asymmetric_edge_weight_is_refused_however_the_graph_is_given():
    w = torch.arange(1.0, RING.size(1) + 1)  # every edge its own weight: (i, j) and (j, i) differ
    adj = torch.sparse_coo_tensor(RING, w, (5, 5), check_invariants=True)
    for args, kw in [((RING, w), {}), ((RING, w), {"rev_index": reverse_edge_index(RING, 5)}), ((adj,), {})]:
        with pytest.raises(ValueError, match="edge_weight must be symmetric"):
            _layer()(torch.randn(5, 3), *args, **kw)


def test_symmetric_normalisation_rounding_is_accepted():
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    g = torch.Generator().manual_seed(0)
    ei = undirected([(i, j) for i in range(30) for j in range(i + 1, 30) if torch.rand(1, generator=g) < 0.3])
    half = torch.rand(ei.size(1) // 2, generator=g) + 0.5
    # D^-1/2 A D^-1/2 multiplies the two directions' factors in different orders
    ei, w = gcn_norm(ei, torch.cat([half, half]), num_nodes=30, add_self_loops=False)
    out = _layer()(torch.randn(30, 3), ei, w)
    assert torch.isfinite(out).all()


def test_graph_checks_run_once_per_graph_and_again_after_an_in_place_change(monkeypatch):
    import gbpn.bp.validation as validation

    calls = []
    check = validation._check_graph
    monkeypatch.setattr(validation, "_check_graph", lambda *a: calls.append(1) or check(*a))
    layer, ei = _layer(), RING.clone()
    rev = reverse_edge_index(ei, 5)
    for _ in range(3):
        layer(torch.randn(5, 3), ei, rev_index=rev)
    assert len(calls) == 1
    layer(torch.randn(6, 3), ei, rev_index=rev)  # another node count is another graph
    assert len(calls) == 2
    ei[1, 0] = 0  # an in-place edit makes edge 0 a self-loop: checked again, and refused
    with pytest.raises(ValueError, match="self-loop"):
        layer(torch.randn(5, 3), ei, rev_index=rev)
    assert len(calls) == 3


# found by a PyG user's audit (issue 13) --------------------------------------------------------

@pytest.mark.parametrize("potential", ["mlp", "sign", "gcn", "sage", "gat", "dagnn"])
def test_node_ids_beyond_the_features_are_refused_before_any_encoder_reads_them(potential):
    # sign / gcn / sage built their adjacency from the ids unchecked: the process crashed
    model = GBPN(4, 3, hidden_channels=8, potential=potential).eval()
    for bad in (9, -1):
        ei = torch.tensor([[0, 1, 1, bad], [1, 0, bad, 1]])
        with pytest.raises(ValueError, match=r"outside 0\.\.4 \(x has 5 rows\)"):
            model(torch.randn(5, 4), ei)
        with pytest.raises(ValueError, match="outside"):
            model.precompute(torch.randn(5, 4), ei)


def test_labels_outside_the_mask_are_never_read():
    layer = _layer()
    log_phi = log_normalize(torch.randn(5, 3))
    mask = torch.tensor([True, False, True, False, False])
    labels = torch.tensor([0, 99, 2, -7, 3])  # only the masked ones are labels
    out = layer(log_phi, RING, known_labels=labels, known_mask=mask)
    same = layer(log_phi, RING, known_labels=torch.tensor([0, 0, 2, 0, 0]), known_mask=mask)
    assert torch.equal(out, same)


@pytest.mark.parametrize("kw,match", [
    (dict(num_steps=-1), "num_steps must be a whole number >= 0"),
    (dict(edge_chunk=0), "edge_chunk must be a positive"),
    (dict(edge_chunk=-1), "edge_chunk must be a positive"),
])
@pytest.mark.parametrize("grad", [False, True])
def test_per_call_counts_are_checked(kw, match, grad):
    log_phi = log_normalize(torch.randn(5, 3)).requires_grad_(grad)
    with torch.set_grad_enabled(grad), pytest.raises(ValueError, match=match):
        _layer()(log_phi, RING, **kw)


@pytest.mark.parametrize("kw,match", [
    (dict(dropout=1.0), "dropout must be in"), (dict(dropout=-0.5), "dropout must be in"),
    (dict(hidden_channels=0), "hidden_channels must be"), (dict(num_hidden=-1), "num_hidden >= 0"),
    (dict(tol=-1.0), "tol must be a finite number >= 0"), (dict(tol=math.nan), "tol must be a finite number"),
    (dict(coupling_init=torch.full((3, 3), math.inf)), "positive finite"),
])
def test_model_options_out_of_range_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        GBPN(4, 3, **kw)


def test_a_diverged_coupling_is_named_as_such():
    layer = _layer()
    with torch.no_grad():
        layer.coupling.weight[0, 1] = math.nan
    with pytest.raises(ValueError, match="diverged"):
        layer(log_normalize(torch.randn(5, 3)), RING)


@pytest.mark.skipif(FUSED_SKIP is not None, reason=str(FUSED_SKIP))
def test_inference_mode_runs_the_fused_kernels_first_call_and_later():
    import gbpn.bp.backends._numba.runtime as runtime

    runtime._state.pop(f"numba-{torch.float32}", None)  # the self-test runs again, now inside inference_mode
    layer = _layer(c=4)
    log_phi = log_normalize(torch.randn(5, 4))
    with torch.inference_mode():
        first = layer(log_phi, RING.clone())
    assert layer.last_backend != "eager" and runtime._state.get(f"numba-{torch.float32}") is None
    with torch.no_grad():
        plain = layer(log_phi, RING)
    with torch.inference_mode():
        again = layer(log_phi, RING)  # a graph cached outside inference_mode
    assert torch.equal(first, plain) and torch.equal(again, plain)


def test_a_misspelt_encoder_option_is_named():
    from gbpn.errors import GBPNError

    with pytest.raises(GBPNError, match="the sign potential takes hops, separate; got hop"):
        GBPN(4, 3, potential="sign", potential_options={"hop": 3})


@pytest.mark.parametrize("where", ["log_self", "edge_index", "both"])
def test_meta_tensors_are_refused_with_a_value_error(where):
    """A meta tensor holds a shape and no values: the library says so instead of failing in .item()."""
    ei = undirected([(0, 1), (1, 2)])
    x = torch.randn(3, 2)
    x_meta, ei_meta = x.to("meta"), ei.to("meta")
    args = {"log_self": (x_meta, ei), "edge_index": (x, ei_meta), "both": (x_meta, ei_meta)}[where]
    with pytest.raises(ValueError, match="meta device"):
        BeliefPropagation(2)(*args)
    with pytest.raises(ValueError, match="meta device"):
        GBPN(2, 4, 2)(*args)


@pytest.mark.parametrize("x,match", [
    (torch.randn(5, 4, dtype=torch.float64), r"x is torch.float64, but this model's parameters are torch.float32"),
    (torch.randn(4), r"x must be a \[N, 4\] feature tensor \(in_channels=4\), got shape \(4,\)"),
    (torch.randn(5, 7), r"x has 7 features per node \(shape \(5, 7\)\), but this model was built with in_channels=4"),
    (torch.randn(5, 4, 1), r"got shape \(5, 4, 1\)"),
    (torch.randn(5, 4, dtype=torch.complex64), "x is torch.complex64: features must be real numbers"),
])
def test_the_model_names_features_it_cannot_take_before_torch_fails_on_them(x, match):
    from gbpn.errors import GBPNError

    with pytest.raises(GBPNError, match=match) as err:
        GBPN(4, 3)(x, RING)
    assert isinstance(err.value, ValueError)  # as the BP layer's own checks are


@pytest.mark.parametrize("kw,match", [
    (dict(num_classes=0), "num_classes must be a positive whole number, got 0"),
    (dict(num_classes=-1), "num_classes must be a positive whole number, got -1"),
    (dict(in_channels=0), "in_channels must be a positive whole number, got 0"),
    (dict(precision="fp8"), "precision must be one of 'fp32', 'bf16', got 'fp8'"),
])
def test_model_sizes_and_precision_are_named_before_torch_warns(kw, match, recwarn):
    from gbpn.errors import GBPNError

    with pytest.raises(GBPNError, match=match):
        GBPN(**{"in_channels": 4, "num_classes": 3, **kw})
    assert [str(w.message) for w in recwarn] == []  # no "Initializing zero-element tensors is a no-op" first


def test_a_float64_layer_is_not_told_to_run_in_float64():
    log_H = torch.tensor([[0.0, -750.0], [-750.0, 0.0]], dtype=torch.float64)
    layer = BeliefPropagation(2, num_steps=2, coupling_init=log_H.exp().clamp_min(1e-320)).double()
    with torch.no_grad():
        layer.coupling.weight.copy_(log_H)
    with pytest.raises(ValueError, match="log H spans") as err:
        layer(torch.zeros(2, 2, dtype=torch.float64), undirected([(0, 1)]))
    assert ".double()" not in str(err.value)
