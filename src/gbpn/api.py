"""What a library user imports and what the ``gbpn`` command calls: train, load, predict, explain.

* :func:`fit` trains one model in memory (:func:`gbpn.train.fit.fit`); :func:`train` runs seeded
  trials into a run folder (``config.json``, ``metrics.json``, splits, ``model.pt``) that resumes,
  and :func:`recorded_run` reads such a folder's ``config.json`` back (older versions' flat ones
  included) to run it again.
* :func:`load` rebuilds a checkpoint's model with the graph it is to read: the graph it was trained
  on unless another is named, checked against the model, the checkpoint's split rebuilt, and the
  evidence (``known``) resolved; :func:`predict` and :func:`explain` take what it returns.

::

    from gbpn import api
    from gbpn.train.config import TrainConfig

    result, folder = api.train("synth-ising+", TrainConfig(epochs=50), trials=2)
    run = api.load(f"{folder}/model.pt")
    probabilities = api.predict(run)          # [N, c], evidence: the training labels for gbpn
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from gbpn.distributed import rank_and_world
from gbpn.errors import GBPNError
from gbpn.models.encoders.registry import spec
from gbpn.train.config import MAX_SEED, TrainConfig
from gbpn.train.fit import fit

__all__ = ["MAX_SEED", "Loaded", "RecordedRun", "TrainConfig", "explain", "fit", "load", "predict", "recorded_run",
           "train"]
logger = logging.getLogger("gbpn")

@dataclass
class RecordedRun:
    """A run folder's ``config.json``, as :func:`train` takes it back."""

    dataset: str
    data_dir: Optional[str]
    sample: int
    seed: int
    trials: int
    config: TrainConfig
    header: Optional[bool]


def recorded_run(path: str) -> RecordedRun:
    """The run a ``config.json`` records (one written by :func:`train`, or by an older version, whose
    flat training options are mapped to the config's parts), every value checked."""
    from gbpn.io import read_json

    if not Path(path).is_file():
        raise GBPNError(f"--config {path}: no such file (give the config.json of an earlier run folder)")
    rec = read_json(path)
    if not isinstance(rec, dict) or not isinstance(rec.get("train"), dict):
        raise GBPNError(f"{path} is not a run's config.json (no \"train\" options): give the config.json of a "
                        "gbpn train run folder")
    config = TrainConfig.from_dict(rec["train"], str(path))
    for key, least in (("seed", 0), ("trials", 1), ("sample", 0)):
        value = rec.get(key, least)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise GBPNError(f"{path}: {key} must be a whole number >= {least}, got {value!r}")
    if rec.get("seed", 0) + rec.get("trials", 1) - 1 > MAX_SEED:
        raise GBPNError(f"{path}: seed + trials must stay within {MAX_SEED} (torch and NumPy read seeds modulo 2^32)")
    try:
        source = rec.get("source") or {"dataset": rec["dataset"], "data_dir": None}
        recorded, (rank, world) = rec.get("world_size"), rank_and_world()
        if recorded is not None and int(recorded) != world and rank == 0:
            logger.warning(f"{path} was run by {recorded} process(es) and this rerun has {world}: data-parallel "
                           f"mini-batches differ, so will the results (torchrun --nproc_per_node {recorded} reruns it "
                           "exactly)")
        return RecordedRun(source["dataset"], source["data_dir"], rec.get("sample", 0), rec["seed"], rec["trials"],
                           config, source.get("header"))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise GBPNError(f"{path} is not a run's config.json ({type(err).__name__}: {err})") from None


def train(dataset: str, config: TrainConfig, trials: int = 1, seed: int = 0, output: Optional[str] = None,
          data_dir: Optional[str] = None, sample: int = 0, header: Optional[bool] = None, save_trials: bool = False,
          progress: bool = True, wait: bool = False, tensorboard: Optional[str] = None) -> Tuple[Dict, str]:
    """Seeded trials of ``config`` on ``dataset`` into the run folder ``output`` (default:
    ``runs/<dataset>-<variant>[-<potential>][-budget<B>]-seed<seed>``), resumed where it stopped; see
    :func:`gbpn.experiments.runner.run_trials`. Returns ``metrics.json``'s contents and the folder."""
    from gbpn.data.datasets import dataset_name
    from gbpn.experiments.runner import run_trials
    from gbpn.train.minibatch import check_data_parallel

    if rank_and_world()[1] > 1:
        check_data_parallel(config)
    potential = ("" if config.potential == "mlp" else f"-{config.potential}") + (
        f"-budget{config.budget:g}" if config.budget is not None else "")  # a search is another run than exhaustive auto
    output = output or f"runs/{dataset_name(dataset)}-{config.variant}{potential}-seed{seed}"
    result = run_trials(dataset, config, trials, seed, output, data_dir, sample, progress=progress, header=header,
                        save_trials=save_trials, wait=wait, tensorboard=tensorboard)
    return result, output


@dataclass
class Loaded:
    """A checkpoint's model with the graph it reads: ``masks`` the checkpoint's split rebuilt on ``data``
    (``None`` without labels), ``mask`` the nodes clamped as evidence (``None``: none), ``known`` its name."""

    model: torch.nn.Module
    meta: Dict
    data: object
    masks: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    mask: Optional[torch.Tensor]
    known: str
    own_graph: bool = True  # the graph and label sample the checkpoint was trained on

    @property
    def class_names(self):
        return self.meta.get("class_names") or [str(k) for k in range(self.model.num_classes)]

    def node_splits(self) -> np.ndarray:
        """Each node's part of the checkpoint's split (``train``, ``val``, ``test``, ``unlabelled``;
        :func:`gbpn.data.splits.node_splits`), all empty on another graph than the checkpoint's, which has no
        split of its own."""
        from gbpn.data.splits import node_splits

        return node_splits(self.data.y, self.masks if self.own_graph else None)


def load(checkpoint: str, dataset: Optional[str] = None, data_dir: Optional[str] = None,
         sample: Optional[int] = None, header: Optional[bool] = None, known: str = "auto") -> Loaded:
    """The checkpoint's model, its metadata, the graph checked against it, the split and the evidence mask.

    The graph is the one the checkpoint was trained on unless ``dataset`` names another. ``known``:
    ``none`` (inductive), ``train`` (the checkpoint's training split), ``labeled`` (every labelled
    node) or ``auto`` (train for gbpn, none for gbpn-i)."""
    from gbpn.data.datasets import load_dataset
    from gbpn.experiments.runner import labels_fingerprint
    from gbpn.train.checkpoint import load_checkpoint

    model, meta = load_checkpoint(checkpoint)
    source = meta.get("source") or {}
    name = dataset or source.get("dataset") or meta.get("dataset")
    if name is None:
        raise GBPNError(f"{checkpoint} does not record its data set: give --dataset")
    data_dir = data_dir or source.get("data_dir")
    same = not dataset or _same_source(dataset, source, meta)
    recorded_sample = meta.get("sample", 0)
    sample = sample if sample is not None else (recorded_sample if same else 0)
    header = header if header is not None or dataset else source.get("header")
    data = load_dataset(name, data_dir, sample=sample, header=header)
    if data.num_features != model.in_channels:
        raise GBPNError(f"the graph has {data.num_features} features per node but the checkpoint expects "
                        f"{model.in_channels}")
    if int(data.y.max()) >= model.num_classes:
        raise GBPNError(f"the graph has {int(data.y.max()) + 1} classes (labels up to {int(data.y.max())}) but the "
                        f"checkpoint knows {model.num_classes}")
    own_graph = same and sample == recorded_sample
    _check_node_weights(meta, data, own_graph)
    if not same and bool((data.y >= 0).any()) and int(data.y.max()) + 1 < model.num_classes:
        logger.warning(f"the checkpoint knows {model.num_classes} classes but {name}'s labels go up to class "
                       f"{int(data.y.max())}: the predictions can name classes this graph does not have")
    known = known if known != "auto" else ("train" if meta.get("variant") == "gbpn" else "none")
    masks = _split_of(data, meta, own_graph, known == "train")
    # another graph than the checkpoint's has no training split of its own: one is drawn as in training
    whose = "the checkpoint's split" if same else "a split drawn as in training"
    mask = None
    if known == "train":
        if masks is None:
            raise GBPNError("--known train needs labels in the graph to rebuild the training split (a graph "
                            "without labels: --known none)")
        recorded = meta.get("labels_sha1")
        public = (meta.get("split") or {}).get("kind") == "public"  # read from the data set, not drawn from labels
        if same and sample != recorded_sample:
            raise GBPNError(f"--sample {sample} differs from the checkpoint's sample {recorded_sample}, whose training "
                            "split it would clamp: use --known none or --known labeled, or leave --sample out")
        if same and not public and recorded and recorded != labels_fingerprint(data.y):
            raise GBPNError(f"the labels of {name} changed since the checkpoint was trained, so its training split "
                            "cannot be rebuilt: use --known none (features only) or --known labeled (every labelled "
                            "node), or train again")
        mask = masks[0]
        if not same:
            logger.warning(f"{name} is not the graph the checkpoint was trained on: --known train clamps the "
                           f"training nodes of {whose} on it ({int(mask.sum())} nodes); --known labeled clamps "
                           "every labelled node")
    elif known == "labeled":
        mask = data.y >= 0
        if not bool(mask.any()):
            logger.warning(f"--known labeled: {name} has no labelled node, so nothing is clamped")
        if masks is not None and bool((mask & masks[2]).any()):
            logger.warning(f"--known labeled clamps the labels of {int((mask & masks[2]).sum())} test node(s) of "
                           f"{whose}: scoring this output on them measures nothing (--known train clamps the training split only)")
    return Loaded(model, meta, data, masks, mask, known, own_graph)


def _check_node_weights(meta: Dict, data, own_graph: bool) -> None:
    """Refuse a checkpoint whose encoder has a weight per node of its training graph (linkx's ``W_A``:
    :attr:`~gbpn.models.encoders.registry.EncoderSpec.node_count`) on another graph, or on the same folder since
    edited: its rows would belong to other nodes."""
    recorded_model = meta.get("model_args") or {}
    trained_nodes = (recorded_model.get("potential_options") or {}).get("num_nodes", data.num_nodes)
    potential = recorded_model.get("potential")
    entry = spec(potential) if isinstance(potential, str) else None
    if entry is not None and entry.node_count and (not own_graph or data.num_nodes != trained_nodes):
        trained_on = (meta.get("source") or {}).get("dataset") or meta.get("dataset")
        sample = meta.get("sample", 0)
        raise GBPNError(f"this checkpoint's {potential} potential has a weight row per node of the graph it was "
                        f"trained on ({trained_on}" + (f", sample {sample}" if sample else "") + "), so it predicts on "
                        "that graph, unchanged, only: leave out --dataset and --sample, or train on this graph")


def _split_of(data, meta: dict, own: bool, needed: bool):
    """The checkpoint's split rebuilt on ``data`` (``own``: the graph and sample it was trained on), or on
    another graph without the public split it recorded, one drawn as in training; ``None`` without 3
    labelled nodes, or where the evidence does not need it and it cannot be had."""
    from gbpn.data.splits import random_split, split_from_record

    if int((data.y >= 0).sum()) < 3:
        return None
    record = meta.get("split")
    try:
        if not isinstance(record, dict):
            raise KeyError("split")
        return split_from_record(data, record)
    except (KeyError, TypeError, ValueError) as err:
        if needed:
            raise GBPNError(f"the checkpoint's split record is damaged ({type(err).__name__}: {err}): use --known "
                            "none or --known labeled") from None
    except GBPNError:  # a public split this graph does not have
        if own and needed:
            raise
        if not own:
            return random_split(data.y, seed=int(meta.get("seed", 0) or 0))
    return None


def _same_source(dataset: str, source: dict, meta: dict) -> bool:
    """Whether ``dataset`` (a name or a folder) is the graph the checkpoint records."""
    recorded = source.get("dataset") or meta.get("dataset")
    if recorded is None:
        return False
    if os.path.isdir(os.path.expanduser(dataset)) or os.path.isdir(os.path.expanduser(recorded)):
        return Path(dataset).expanduser().resolve() == Path(recorded).expanduser().resolve()
    return dataset.lower() == recorded.lower()


def predict(run: Loaded, num_steps: Optional[int] = None, node_chunk: Optional[int] = None,
            edge_chunk: Optional[int] = None, half_messages: bool = False, device: str = "cpu") -> np.ndarray:
    """Class probabilities ``[N, c]`` of every node of ``run.data`` (evidence: ``run.mask``) on ``device``;
    ``half_messages``: one bfloat16 message per undirected edge (:func:`gbpn.train.fit.predict`)."""
    from gbpn.train.config import resolve_device
    from gbpn.train.fit import predict as beliefs

    run.model.to(resolve_device(device))
    return beliefs(run.model, run.data, run.mask, num_steps=num_steps, node_chunk=node_chunk, edge_chunk=edge_chunk,
                   message_dtype=torch.bfloat16 if half_messages else None).exp().cpu().numpy()


def explain(run: Loaded, node: int) -> Dict:
    """Why ``node`` got its prediction: its own evidence and each neighbour's message
    (:func:`gbpn.experiments.explain.explain_node`)."""
    from gbpn.experiments.explain import explain_node

    ex = explain_node(run.model, run.data, node, run.mask, run.meta.get("class_names"))
    label = int(run.data.y[node])
    ex.update(split=str(run.node_splits()[node]) or None, label=ex["class_names"][label] if label >= 0 else None)
    return ex
