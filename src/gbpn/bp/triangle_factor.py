r"""The triangle (motif) potential shared by every triangle of the graph, in two parametrisations."""
from __future__ import annotations

import itertools
from typing import Optional

import torch
from torch import Tensor, nn

# the six permutations of a triangle's three variables (tensor axes)
_PERMUTATIONS = tuple(itertools.permutations(range(3)))
FORMS = ("full", "cp")
# the full form holds c^3 numbers: from this many classes on the CP form is the sensible default
CP_FROM_CLASSES = 10


def default_form(num_classes: int) -> str:
    """``"full"`` below :data:`CP_FROM_CLASSES` classes (``c^3`` stays small), ``"cp"`` from there on."""
    return "full" if num_classes < CP_FROM_CLASSES else "cp"


class TriangleFactor(nn.Module):
    r"""A positive :math:`c \times c \times c` triangle potential :math:`T`, symmetric under every
    permutation of its three variables by construction.

    **Full form** (``form="full"``): an unconstrained :math:`W \in \mathbb{R}^{c\times c\times c}` gives

    .. math::
        \log T_{abc} = \frac{1}{6}\sum_{\sigma \in S_3} W_{\sigma(a,b,c)}, \qquad T = \exp(\log T),

    positive and symmetric for every :math:`W`. :math:`c^3` numbers: for a few classes.

    **CP form** (``form="cp"``, rank :math:`R`): unconstrained :math:`V \in \mathbb{R}^{R \times c}`
    give positive factors :math:`u_r = \exp(V_r)` and

    .. math::
        T_{abc} = \sum_{r=1}^{R} u_r(a)\,u_r(b)\,u_r(c),

    symmetric and positive for every :math:`V`, with :math:`R c` numbers; BP then never forms a
    :math:`c^3` tensor (:func:`gbpn.bp.motifs.triangle_message_cp` costs :math:`O(R c)` per message).
    The default for :math:`c \ge` :data:`CP_FROM_CLASSES` (:func:`default_form`). The factors are
    strictly positive, so a symmetric :math:`T` of nonnegative CP rank :math:`\le R` is approached (zeros
    as :math:`V \to -\infty`), not always reached; the constant :math:`T` (no interaction) is rank 1.

    BP normalises its messages, so :math:`T` and :math:`aT` (:math:`a > 0`) give identical beliefs;
    :meth:`normalized` removes that scale (mean of :math:`\log T` set to 0).

    Initialisation (:meth:`reset_parameters`): with no ``init``, the full form starts at
    :math:`T = 1` (no interaction, exactly); the CP form at :math:`V \sim \mathcal{N}(0, \sigma^2)`
    with :math:`\sigma` = ``init_scale`` (from torch's global generator, as ``nn.Linear``): a constant
    start would give every rank the same gradient forever. ``init`` is :math:`T` itself ``[c, c, c]``
    (full form: positive and symmetric) or the factors :math:`u` ``[R, c]`` (CP form: positive).

    Args:
        num_classes (int): :math:`c`.
        form (str, optional): ``"full"`` or ``"cp"``. (default: :func:`default_form` of ``num_classes``)
        rank (int, optional): :math:`R` of the CP form. (default: ``num_classes``)
        learnable (bool, optional): learn the parameters or keep them as a buffer. (default: ``True``)
        init (Tensor, optional): see above. (default: ``None``)
        init_scale (float, optional): :math:`\sigma` of the CP form's random start. (default: ``0.1``)

    Shapes:
        T, log_T: ``[c, c, c]``; log_factors (CP form): ``[R, c]``
    """

    def __init__(
        self,
        num_classes: int,
        form: Optional[str] = None,
        rank: Optional[int] = None,
        learnable: bool = True,
        init: Optional[Tensor] = None,
        init_scale: float = 0.1,
    ):
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        form = default_form(num_classes) if form is None else form
        if form not in FORMS:
            raise ValueError(f"form must be 'full' or 'cp', got {form!r}")
        if form == "full" and rank is not None:
            raise ValueError("rank is a parameter of the CP form (form='cp'); the full form has none")
        rank = num_classes if rank is None else rank
        if rank < 1:
            raise ValueError(f"rank must be positive, got {rank}")
        self.num_classes, self.form, self.learnable, self.init_scale = num_classes, form, learnable, init_scale
        self.rank = rank if form == "cp" else None
        shape = (num_classes,) * 3 if form == "full" else (rank, num_classes)
        if init is not None:
            init = torch.as_tensor(init)
            init = init if init.is_floating_point() else init.to(torch.get_default_dtype())
            if tuple(init.shape) != shape:
                raise ValueError(f"init of the {form} form must have shape {list(shape)}, got {list(init.shape)}")
            if not bool(((init > 0) & torch.isfinite(init)).all()):
                raise ValueError("init must have positive finite entries")
            if form == "full" and not all(torch.allclose(init, init.permute(p)) for p in _PERMUTATIONS):
                raise ValueError("init T must be symmetric under every permutation of its three axes")
        self._init = None if init is None else init.clone()
        weight = torch.empty(shape, dtype=None if init is None else init.dtype)
        if learnable:
            self.weight = nn.Parameter(weight)
        else:
            self.register_buffer("weight", weight)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self._init is not None:
                self.weight.copy_(self._init.log())
            elif self.form == "full":
                self.weight.zero_()
            else:
                self.weight.normal_(0.0, self.init_scale)

    @property
    def log_factors(self) -> Tensor:
        r"""CP form: :math:`\log u` ``[R, c]`` (differentiable); the full form has none."""
        if self.form != "cp":
            raise AttributeError("log_factors belongs to the CP form (form='cp')")
        return self.weight

    @property
    def log_T(self) -> Tensor:
        r""":math:`\log T` ``[c, c, c]`` (differentiable), symmetric by construction. For the CP form
        this builds :math:`[R, c, c, c]` once (for reading; BP itself never calls it)."""
        if self.form == "full":
            return sum(self.weight.permute(p) for p in _PERMUTATIONS) / 6.0
        v = self.weight
        return torch.logsumexp(v[:, :, None, None] + v[:, None, :, None] + v[:, None, None, :], dim=0)

    @property
    def T(self) -> Tensor:
        """The triangle potential as a detached ``[c, c, c]`` tensor."""
        return self.log_T.detach().exp()

    def normalized(self) -> Tensor:
        """``T`` with its unidentifiable scale removed: ``exp(log T - mean(log T))``."""
        log_T = self.log_T.detach()
        return (log_T - log_T.mean()).exp()

    def spread(self) -> float:
        r"""The dynamic range BP's products must hold: :math:`\max - \min` of what BP reads, :math:`\log T`
        (full form) or :math:`\log u` (CP form: the messages multiply by :math:`u`, never by a formed
        :math:`T`). :func:`gbpn.bp.motifs.check_triangle_range` refuses a spread the dtype cannot hold."""
        w = self.forward().detach()
        return float(w.max() - w.min()) if w.numel() else 0.0

    def forward(self) -> Tensor:
        """What BP reads: :math:`\\log T` (full form) or :math:`\\log u` (CP form)."""
        return self.log_T if self.form == "full" else self.weight

    def extra_repr(self) -> str:
        rank = f", rank={self.rank}" if self.form == "cp" else ""
        return f"num_classes={self.num_classes}, form={self.form!r}{rank}, learnable={self.learnable}"

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.extra_repr()})"

