#!/usr/bin/env bash
# The project's checks and measurements on a GPU machine, in one go (about 11 minutes on an H200; the pytest lines are the checks, the rest timings).
# Uses the machine's own torch, triton and torch_geometric; results go to $OUT (default /tmp/gbpn-gpu).
set -o pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gbpn-gpu}
mkdir -p "$OUT"
nvidia-smi -L
python3 -c "import torch, triton, torch_geometric as g; print('torch', torch.__version__, 'triton', triton.__version__, 'pyg', g.__version__, torch.cuda.get_device_name())"
# the Triton BP kernels against the eager path, then the block-size sweep and the step against GCNConv
timeout 120 python3 -m pytest -q -p no:cacheprovider -n 8 --tb=line tests/bp/test_fused_triton.py 2>&1 | tail -12 | tee "$OUT/tests_triton.log"
# implicit differentiation, the potential encoders, mini-batch, torchrun (NCCL) and the CLI on CUDA
timeout 240 python3 -m pytest -q -p no:cacheprovider -n 8 --tb=short tests/test_cuda.py 2>&1 | tail -30 | tee "$OUT/tests_cuda.log"
timeout 180 python3 benchmarks/triton_blocks.py --classes 2 7 40 47 2>&1 | tee "$OUT/triton_blocks.log"
timeout 300 python3 benchmarks/bp_step.py --device cuda --classes 2 7 40 47 --reps 20 --plain-edge-fraction 0.5 2>&1 | tee "$OUT/bp_step_cuda.log"
# the CLI on CUDA: train, then predict from the checkpoint
timeout 120 python3 -m gbpn train --dataset synth-ising+ --device cuda --trials 1 --epochs 100 --quiet --output /tmp/gbpn-gpu-run &&
  timeout 60 python3 -m gbpn predict --checkpoint /tmp/gbpn-gpu-run/model.pt --device cuda --output /tmp/gbpn-gpu-run/pred.csv 2>&1 | tail -2 | tee "$OUT/cli.log"
# the device paths of training and BP (device="auto" trains on CUDA here)
timeout 300 python3 -m pytest -q -p no:cacheprovider -n 8 --tb=line tests/test_training.py tests/nn 2>&1 | tail -12 | tee "$OUT/tests.log"
