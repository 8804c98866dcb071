"""The data sets :func:`gbpn.data.load_dataset` knows by name, and the check of a name or folder.

Apart from the loaders so that the command line can refuse an unknown data set before it loads
PyTorch and PyG (seconds).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List

from gbpn.errors import GBPNError

# the synthetic grids of the paper's appendix (gbpn.data.mrf samples them)
SYNTHETIC_KINDS = ("ising+", "ising-", "mrf+", "mrf-")
PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
# Class names in the order of the Planetoid files' label columns (PyG's y), checked by each class's size against
# the original data sets (LINQS): Cora 351 Theory, 217 Reinforcement_Learning, 418 Genetic_Algorithms,
# 818 Neural_Networks, 426 Probabilistic_Methods, 298 Case_Based, 180 Rule_Learning; CiteSeer 249 AI (264 here:
# the 15 nodes missing from the Planetoid files get class 0), 590 ML, 668 IR, 701 DB, 596 Agents, 508 HCI.
PLANETOID_CLASSES = {
    "cora": ["Theory", "Reinforcement_Learning", "Genetic_Algorithms", "Neural_Networks", "Probabilistic_Methods",
             "Case_Based", "Rule_Learning"],
    "citeseer": ["AI", "ML", "IR", "DB", "Agents", "HCI"],
}
COAUTHOR = {"cs": "CS", "physics": "Physics"}
WIKIPEDIA = ("chameleon", "squirrel")
# Platonov et al. (2023) npz files; the filtered ones drop duplicate nodes that leak across splits.
YANDEX = {"chameleon-filtered": "chameleon_filtered", "squirrel-filtered": "squirrel_filtered",
          "chameleon-yandex": "chameleon", "squirrel-yandex": "squirrel"}
OGB = ("ogbn-arxiv", "ogbn-products")
REFERENCE_GRIDS = SYNTHETIC_KINDS  # the paper's files of them (ising+ ...); synth-<kind>: sampled here
# the triangle MRF of issue 50: a 32 x 32 triangular lattice, two classes, the three-spin triangle potential
# (no pairwise coupling), the angular field (gbpn.data.triangle_mrf)
TRIANGLE_MRF = "synth-triangle"
ALIASES = {"county_facebook": "election", "sexual_interaction": "sexual"}


def available_datasets() -> List[str]:
    return (
        list(PLANETOID) + list(COAUTHOR) + list(WIKIPEDIA) + list(YANDEX) + ["election", "sexual", "elliptic"] + list(OGB)
        + list(REFERENCE_GRIDS)
        + [f"synth-{k}" for k in SYNTHETIC_KINDS] + [TRIANGLE_MRF]
    )


def dataset_name(dataset: str) -> str:
    """How runs and tables name a data set: a folder by its last component (``~`` and ``.`` expanded),
    a built-in name as it is."""
    path = Path(os.path.abspath(os.path.expanduser(dataset)))
    return path.name if path.is_dir() else dataset


def check_dataset_name(name: str) -> None:
    """Raise :class:`GBPNError` unless ``name`` is a data set of :func:`available_datasets` or an existing
    folder: the check :func:`load_dataset` makes first, without loading anything."""
    if ALIASES.get(name.lower(), name.lower()) in available_datasets() or Path(name).expanduser().is_dir():
        return
    if "/" in name or os.sep in name or name.startswith((".", "~")):
        raise GBPNError(f"no such folder: {name} (a bring-your-own data set is a folder with edges.csv and "
                        "features.csv)")
    raise GBPNError(f"unknown dataset {name!r}: choose one of {', '.join(available_datasets())}, "
                    "or give the path of a folder with edges.csv and features.csv")
