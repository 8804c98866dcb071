r"""Label-propagation baselines: LP (Zhou et al. 2004) and Correct & Smooth (Huang et al. 2021).

**LP.** With :math:`S = D^{-1/2} A D^{-1/2}` and :math:`Y^{(0)}` the one-hot labels of
the known nodes (zero rows elsewhere),

.. math::
    Y^{(\ell+1)} = \mathrm{clip}_{[0,1]}\big(\alpha S Y^{(\ell)} + (1 - \alpha) Y^{(0)}\big),
    \qquad \ell = 0, \dots, L-1,

and with ``clamp_known`` the known rows are reset to their labels after every step
(the harmonic-function form of Zhu et al. 2003). Prediction: :math:`\arg\max_y Y^{(L)}_{iy}`.

**C&S.** A base predictor's soft outputs :math:`Z` (here the trained
:class:`~gbpn.models.mlp.MLP`) are *corrected* by propagating the training residuals
:math:`E^{(0)}_L = Y_L - Z_L` with :math:`E \leftarrow \alpha_1 S E + (1 - \alpha_1) E^{(0)}`,
:math:`\hat Z = Z + \gamma E` (autoscaled :math:`\gamma`), then *smoothed* by LP from
:math:`\hat Z` with the training rows replaced by their labels, coefficient :math:`\alpha_2`.
Both use PyG's :class:`~torch_geometric.nn.models.LabelPropagation` /
:class:`~torch_geometric.nn.models.CorrectAndSmooth`.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.models import CorrectAndSmooth, LabelPropagation


class LabelPropagationModel(nn.Module):
    """Label propagation from the labels of ``known_mask`` nodes; no learned parameters.

    Args:
        num_classes: number of classes :math:`c`.
        num_layers: propagation steps :math:`L`. (default: ``50``)
        alpha: :math:`\\alpha \\in [0, 1]`. (default: ``0.9``)
        clamp_known: reset known rows to their labels after each step. (default: ``True``)
    """

    def __init__(self, num_classes: int, num_layers: int = 50, alpha: float = 0.9, clamp_known: bool = True):
        super().__init__()
        self.num_classes = num_classes
        self.clamp_known = clamp_known
        self.prop = LabelPropagation(num_layers, alpha)

    @property
    def alpha(self) -> float:
        return self.prop.alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        self.prop.alpha = value

    def reset_parameters(self) -> None:
        """Nothing to reset (kept for a uniform interface)."""

    @torch.no_grad()
    def forward(self, y: Tensor, edge_index: Tensor, known_mask: Tensor, edge_weight: Optional[Tensor] = None) -> Tensor:
        """Soft labels ``[N, c]``; only ``y[known_mask]`` is read (other entries may be ``-1``)."""
        y0 = F.one_hot(y.clamp_min(0), self.num_classes).float()
        y0[~known_mask] = 0.0

        def post_step(out: Tensor) -> Tensor:
            out.clamp_(0.0, 1.0)
            if self.clamp_known:
                out[known_mask] = y0[known_mask]
            return out

        return self.prop(y0, edge_index, mask=known_mask, edge_weight=edge_weight, post_step=post_step)


class CorrectSmoothModel(nn.Module):
    """Correct & Smooth post-processing of a base predictor's class probabilities.

    Args:
        num_correction_layers: :math:`L_1`. (default: ``50``)
        correction_alpha: :math:`\\alpha_1`. (default: ``0.8``)
        num_smoothing_layers: :math:`L_2`. (default: ``50``)
        smoothing_alpha: :math:`\\alpha_2`. (default: ``0.8``)
        autoscale: choose :math:`\\gamma` automatically; else ``scale``. (default: ``True``)
        scale: fixed :math:`\\gamma` when ``autoscale`` is off. (default: ``1.0``)
    """

    def __init__(
        self,
        num_correction_layers: int = 50,
        correction_alpha: float = 0.8,
        num_smoothing_layers: int = 50,
        smoothing_alpha: float = 0.8,
        autoscale: bool = True,
        scale: float = 1.0,
    ):
        super().__init__()
        self.cs = CorrectAndSmooth(num_correction_layers, correction_alpha, num_smoothing_layers, smoothing_alpha, autoscale, scale)

    def set_alphas(self, correction_alpha: float, smoothing_alpha: float) -> None:
        self.cs.prop1.alpha = correction_alpha
        self.cs.prop2.alpha = smoothing_alpha

    def reset_parameters(self) -> None:
        """Nothing to reset (kept for a uniform interface)."""

    @torch.no_grad()
    def forward(self, probs: Tensor, y: Tensor, train_mask: Tensor, edge_index: Tensor) -> Tensor:
        """Corrected and smoothed scores ``[N, c]`` from base probabilities ``probs``."""
        y_train = y[train_mask]
        corrected = self.cs.correct(probs, y_train, train_mask, edge_index)
        return self.cs.smooth(corrected, y_train, train_mask, edge_index)
