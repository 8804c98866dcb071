"""Data-parallel GBPN training on sampled computation trees.

    torchrun --nproc_per_node 2 examples/train_ddp.py --dataset cora --data-dir ../shared/datasets --epochs 50
"""
import argparse
import json
import sys

import torch
import torch.distributed as dist

from gbpn.config import TrainConfig
from gbpn.data import load_dataset
from gbpn.experiments.distributed import fit_distributed

ap = argparse.ArgumentParser()
ap.add_argument("--dataset", default="synth-ising+")
ap.add_argument("--data-dir", default=None)
ap.add_argument("--variant", default="gbpn", choices=["gbpn", "gbpn-i"])
ap.add_argument("--epochs", type=int, default=20)
ap.add_argument("--batch-size", type=int, default=256)
ap.add_argument("--hidden", type=int, default=256)
ap.add_argument("--steps", type=int, default=2)
ap.add_argument("--fanout", type=int, default=5)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--params-out", default=None, help="write this rank's final parameters to PREFIX.rank<k>.pt")
args = ap.parse_args()

torch.set_num_threads(1)
data = load_dataset(args.dataset, args.data_dir)
cfg = TrainConfig(variant=args.variant, epochs=args.epochs, batch_size=args.batch_size, hidden=args.hidden,
                  num_steps=args.steps, fanout=args.fanout)
model, metrics, losses = fit_distributed(data, cfg, seed=args.seed)
rank = dist.get_rank()
if args.params_out:
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, f"{args.params_out}.rank{rank}.pt")
# one write per line: print() writes the text and the newline separately, and unbuffered the two ranks'
# lines can interleave in a shared pipe
sys.stdout.write(json.dumps({"rank": rank, "first_loss": losses[0], "last_loss": losses[-1], **metrics}) + "\n")
sys.stdout.flush()
dist.destroy_process_group()
