"""The finished units of one trial (an ``auto`` candidate, a rung of a budgeted search), kept in the run folder
so that an interrupted trial resumes without training them again.

Each unit is one file, written atomically once the unit is finished: ``<key>.json`` (its results) or
``<key>.pt`` (a trained candidate's weights with its results). The folder is named by a digest of what the
units depend on (the training options, the seed, the split), so a folder left by another configuration is
never read as this one's.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor

from gbpn.io import read_json, save_torch, write_json


class Units:
    """Finished units under ``root / <digest>``; ``root=None`` keeps nothing (every unit is trained)."""

    def __init__(self, root: Optional[Path], config: Dict, seed: int, masks: Tuple[Tensor, ...]):
        h = hashlib.sha1(json.dumps(config, sort_keys=True, default=str).encode())
        h.update(str(seed).encode())
        for m in masks:
            h.update(m.cpu().numpy().tobytes())
        self.folder = None if root is None else Path(root) / h.hexdigest()[:16]

    def get(self, key: str) -> Optional[Dict]:
        path = self._path(key, ".json")
        return read_json(path) if path is not None and path.is_file() else None

    def put(self, key: str, value: Dict) -> None:
        if self.folder is not None:
            write_json(self._path(key, ".json"), value)

    def get_torch(self, key: str) -> Optional[Dict[str, Any]]:
        path = self._path(key, ".pt")
        return torch.load(path, weights_only=False) if path is not None and path.is_file() else None

    def put_torch(self, key: str, value: Dict[str, Any]) -> None:
        if self.folder is not None:
            save_torch(self._path(key, ".pt"), value)

    def _path(self, key: str, ext: str) -> Optional[Path]:
        return None if self.folder is None else self.folder / f"{key}{ext}"
