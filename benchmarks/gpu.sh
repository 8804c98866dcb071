#!/usr/bin/env bash
# The project's checks and measurements on a GPU machine, in one go (about 5 minutes on an H100).
# Uses the machine's own torch and torch_geometric; results go to $OUT (default /tmp/gbpn-gpu).
set -o pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gbpn-gpu}
mkdir -p "$OUT"
nvidia-smi -L
python3 -c "import torch, torch_geometric as g; print('torch', torch.__version__, 'pyg', g.__version__, torch.cuda.get_device_name())"
# the device paths of training and BP (device="auto" trains on CUDA here)
python3 -m pytest -q -p no:cacheprovider tests/test_training.py tests/nn 2>&1 | tail -3
python3 -m gbpn train --dataset synth-ising+ --device cuda --trials 1 --epochs 100 --quiet --output /tmp/gbpn-gpu-run &&
  python3 -m gbpn predict --checkpoint /tmp/gbpn-gpu-run/model.pt --device cuda --output /tmp/gbpn-gpu-run/pred.csv
python3 benchmarks/bp_step.py --device cuda --classes 2 7 40 47 --reps 10 --plain-edge-fraction 0.5 | tee "$OUT/bp_step_cuda.log"
python3 benchmarks/full_batch.py --device cuda --epochs 50 | tee "$OUT/full_batch_cuda.log"
python3 benchmarks/full_batch.py --device cpu --epochs 2 | tee "$OUT/full_batch_cpu.log"
