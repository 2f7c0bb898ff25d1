#!/bin/bash
# LaMer free-text policy on CPU: held-out before, a tiny training run, held-out after. 1 thread.
cd /work/wt-22
export PYTHONPATH=/work/wt-22/src OMP_NUM_THREADS=1 TORCH_NUM_THREADS=1 MKL_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
EVAL="--memory lamer --attempts 2 --tasks 4 --temperature 0.7 --free-text 32 --retries 0 -e turns=4"
t0=$(date +%s)
echo "== before $(date)"; timeout 420 python -m ttlearn run minesweeper $EVAL --llm hf:smollm2 --out /tmp/wt22run/before; echo "rc=$? $(( $(date +%s)-t0 ))s"
t1=$(date +%s)
echo "== train $(date)"; timeout 660 python -m ttlearn train lamer --env minesweeper --env-options turns=4 --tasks 4 --tasks-per-step 1 --group 2 --attempts 2 --steps 2 --save-every 1 --reply-tokens 32 --reflection-tokens 32 --temperature 0.7 --lr 2e-4 --device cpu --out /tmp/wt22run/train; echo "rc=$? $(( $(date +%s)-t1 ))s"
t2=$(date +%s)
echo "== after $(date)"; timeout 420 python -m ttlearn run minesweeper $EVAL --policy /tmp/wt22run/train/final --out /tmp/wt22run/after; echo "rc=$? $(( $(date +%s)-t2 ))s"
echo "== total $(( $(date +%s)-t0 ))s $(date)"
