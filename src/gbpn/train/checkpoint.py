"""Checkpoints: a GBPN's weights with what rebuilds it, saved atomically and loaded with clear errors."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Dict, Tuple

import torch

from gbpn.bp.numerics import REFUSE
from gbpn.errors import GBPNError
from gbpn.io import save_torch
from gbpn.models.gbpn import GBPN


CHECKPOINT_FORMAT = "gbpn-checkpoint-v1"


def save_checkpoint(path: str | Path, model: torch.nn.Module, meta: Dict[str, Any]) -> None:
    """Save the model's weights with everything needed to rebuild it (``meta['model_args']``)."""
    save_torch(path, {"format": CHECKPOINT_FORMAT, "state_dict": model.state_dict(), **meta})


def _check_size(path: Path, payload: Dict[str, Any]) -> None:
    """The model ``model_args`` describe, built on the meta device (no memory), must fit in the weights
    the file holds: a crafted ``model_args`` cannot make the process allocate more than the file."""
    with torch.device("meta"):
        shell = GBPN(**payload["model_args"])
    need = sum(t.numel() for t in shell.state_dict().values())
    have = sum(v.numel() for v in payload["state_dict"].values() if isinstance(v, torch.Tensor))
    if need > have:
        raise ValueError(f"model_args ask for {need:,} weights, the file holds {have:,}")


def load_checkpoint(path: str | Path) -> Tuple[torch.nn.Module, Dict[str, Any]]:
    """Rebuild a :class:`~gbpn.GBPN` from :func:`save_checkpoint`'s file; clear errors if it is not one."""
    path = Path(path)
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.pt"))
        raise GBPNError(f"checkpoint {path} is a folder: give the checkpoint file in it"
                        + (f" ({', '.join(str(path / n) for n in inside[:3])})" if inside else
                           " (a run's folder holds model.pt)"))
    if not path.is_file():
        raise GBPNError(f"checkpoint {path} does not exist")
    failed = None
    with warnings.catch_warnings(record=True) as caught:  # torch's own warnings, looked at before they are shown
        warnings.simplefilter("always")
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except PermissionError as err:  # unreadable, not damaged
            raise GBPNError(f"cannot read checkpoint {path}: {err.strerror or err}") from None
        except Exception as err:
            failed = err
    if any("TorchScript" in str(w.message) for w in caught):  # torch.load would hand it to torch.jit.load
        raise GBPNError(f"checkpoint {path} is a TorchScript archive (torch.jit.save), not a gbpn checkpoint: give "
                        "the model.pt that gbpn train wrote")
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if failed is not None:
        raise GBPNError(f"checkpoint {path} is corrupt or not a gbpn checkpoint ({type(failed).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise GBPNError(f"{path} is not a gbpn checkpoint (expected format {CHECKPOINT_FORMAT})")
    try:
        _check_size(path, payload)
        model = GBPN(**payload["model_args"])
        # checkpoints from before pluggable encoders named the MLP potential "mlp"
        state = {("encoder." + k[4:] if k.startswith("mlp.") else k): v for k, v in payload["state_dict"].items()}
        model.load_state_dict(state)
    except Exception as err:
        first = str(err).strip().splitlines()  # load_state_dict lists every mismatch on its own line
        detail = " ".join(line.strip() for line in first[:3]) + (" ..." if len(first) > 3 else "")
        raise GBPNError(f"checkpoint {path} does not match the GBPN model ({type(err).__name__}: {detail})") from None
    bad = [k for k, v in payload["state_dict"].items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise GBPNError(f"checkpoint {path} has NaN or infinite weights ({', '.join(bad[:3])}): it cannot "
                        "predict anything; train again (a smaller --lr often helps)")
    log_H = model.bp.log_H.detach()
    spread = float(log_H.max() - log_H.min())
    if not spread <= REFUSE[torch.float32]:
        raise GBPNError(f"checkpoint {path} has a coupling whose log H spans {spread:.0f} (max - min), beyond the "
                        f"{REFUSE[torch.float32]:.0f} that BP computes exactly in float32: training diverged; train "
                        "again (a smaller --coupling-lr often helps)")
    triangle = getattr(model.bp, "triangle", None)  # a triangle model's T: BP reads log T (or log u) the same way
    if triangle is not None and not triangle.spread() <= REFUSE[torch.float32]:
        raise GBPNError(f"checkpoint {path} has a triangle factor whose log spans {triangle.spread():.0f} (max - min), "
                        f"beyond the {REFUSE[torch.float32]:.0f} that BP computes exactly in float32: training "
                        "diverged; train again (a smaller --coupling-lr often helps)")
    names = payload.get("class_names")
    if names and len(names) != model.num_classes:
        raise GBPNError(f"checkpoint {path} names {len(names)} classes but its model has {model.num_classes}; "
                        "train it again with matching labels and class names")
    model.eval()
    meta = {k: v for k, v in payload.items() if k != "state_dict"}
    return model, meta
