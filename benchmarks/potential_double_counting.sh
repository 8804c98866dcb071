#!/bin/bash
# issue 11, double counting: the sign potential with K = 0 (no BP), with a 10x smaller coupling lr and
# with the defaults (K = 5, coupling lr 1e-2), on the first 3 Chameleon-filtered splits, in one run
for extra in "--steps 0" "--coupling-lr 1e-3" ""; do
  tag=$(echo "${extra:-default}" | tr -d ' -')
  gbpn train --dataset chameleon-filtered --data-dir ../shared/datasets --potential sign --dropout 0.1 $extra \
    --trials 3 --patience 100 --threads 1 -q --output runs/double/$tag 2>&1 | tail -1 | sed "s|^|${extra:-defaults}: |"
done
