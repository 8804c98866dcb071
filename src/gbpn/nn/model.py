"""The GBPN model: an MLP self-potential followed by belief propagation."""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gbpn.nn.bp import BeliefPropagation


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout; a uniform draw compared with ``p`` is about 2.5x faster on CPU than
    ``F.dropout``'s Bernoulli sampler, which dominated a full-batch step on Cora."""
    if not training or p == 0.0:
        return x
    if x.is_sparse:  # drop stored values only: zeros stay zero, as in dense dropout
        x = x.coalesce()
        return torch.sparse_coo_tensor(x.indices(), dropout(x.values(), p, True), x.shape, is_coalesced=True, check_invariants=False)
    return x * (torch.rand_like(x) >= p).to(x.dtype) * (1.0 / (1.0 - p))


class MLP(nn.Module):
    r"""Feed-forward network :math:`x \mapsto W_L\,\sigma(\dots\sigma(W_1\,\mathrm{drop}(x)))`,
    with ReLU :math:`\sigma` and dropout before every linear layer.

    Accepts a dense ``[N, F]`` input or a sparse COO one (bag-of-words features):
    the first layer then runs as a sparse-dense product and input dropout acts on
    the stored values only, so cost scales with the number of non-zeros.

    Args:
        in_channels (int): input feature size.
        hidden_channels (int): hidden width.
        out_channels (int): output size.
        num_hidden (int, optional): number of hidden layers. (default: ``2``)
        dropout (float, optional): dropout probability. (default: ``0.0``)
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_hidden: int = 2, dropout: float = 0.0):
        super().__init__()
        self.in_channels, self.hidden_channels, self.out_channels = in_channels, hidden_channels, out_channels
        self.num_hidden = num_hidden
        self.dropout = dropout
        sizes = [in_channels] + [hidden_channels] * num_hidden + [out_channels]
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.lins:
            lin.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        first = self.lins[0]
        x = dropout(x, self.dropout, self.training)
        h = torch.sparse.mm(x, first.weight.T) + first.bias if x.is_sparse else first(x)
        for lin in self.lins[1:]:
            h = lin(dropout(F.relu(h), self.dropout, self.training))
        return h

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, {self.out_channels}, "
            f"num_hidden={self.num_hidden}, dropout={self.dropout})"
        )


class GBPN(nn.Module):
    r"""Graph Belief Propagation Network.

    .. math::
        \log\phi_i = \mathrm{log\_softmax}(\mathrm{MLP}_\theta(x_i)), \qquad
        \log p_i = \mathrm{BP}_K(\log\phi, H)_i

    with :class:`~gbpn.nn.bp.BeliefPropagation` for :math:`\mathrm{BP}_K`.
    The same module serves both variants:

    * **GBPN-I** (inductive): call without ``known_labels``; it uses features
      only and runs on graphs it was not trained on.
    * **GBPN** (transductive): pass ``known_labels`` and ``known_mask``; those
      nodes are clamped to their label and condition everyone else.

    Args:
        in_channels (int): node feature size.
        num_classes (int): number of classes :math:`c`.
        hidden_channels (int, optional): MLP width. (default: ``256``)
        num_hidden (int, optional): MLP hidden layers. (default: ``2``)
        dropout (float, optional): MLP dropout. (default: ``0.1``)
        num_steps (int, optional): BP steps :math:`K`. (default: ``5``)
        damping, tol, learn_coupling, coupling_init: see
            :class:`~gbpn.nn.bp.BeliefPropagation`.

    Shapes:
        - **input:** ``x`` ``[N, F]`` (dense or sparse COO), ``edge_index``
          ``[2, E]``, optional ``rev_index`` ``[E]``, ``edge_weight`` ``[E]``,
          ``known_labels``/``known_mask`` ``[N]``
        - **output:** normalised log-beliefs ``[N, c]``
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden_channels: int = 256,
        num_hidden: int = 2,
        dropout: float = 0.1,
        num_steps: int = 5,
        damping: float = 0.0,
        tol: Optional[float] = None,
        learn_coupling: bool = True,
        coupling_init: Optional[Tensor] = None,
    ):
        super().__init__()
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.mlp = MLP(in_channels, hidden_channels, num_classes, num_hidden, dropout)
        self.bp = BeliefPropagation(num_classes, num_steps, damping, tol, learn_coupling, coupling_init)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.mlp.reset_parameters()
        self.bp.reset_parameters()

    @property
    def H(self) -> Tensor:
        """The learned coupling matrix ``[c, c]`` (detached)."""
        return self.bp.H

    @property
    def log_H(self) -> Tensor:
        return self.bp.log_H

    def self_potential(self, x: Tensor) -> Tensor:
        """Normalised log self-potentials ``[N, c]`` from the features alone."""
        return F.log_softmax(self.mlp(x), dim=-1)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        rev_index: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
        known_labels: Optional[Tensor] = None,
        known_mask: Optional[Tensor] = None,
        num_steps: Optional[int] = None,
        return_residuals: bool = False,
    ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        return self.bp(
            self.self_potential(x),
            edge_index,
            rev_index=rev_index,
            edge_weight=edge_weight,
            known_labels=known_labels,
            known_mask=known_mask,
            num_steps=num_steps,
            return_residuals=return_residuals,
        )

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(mlp={self.mlp!r}, bp={self.bp!r})"
