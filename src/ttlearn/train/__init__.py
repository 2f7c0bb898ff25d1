"""Reinforcement learning over memory writers (MemoPilot) and agent policies (LaMer).

`advantages` holds the numpy maths that turns rewards into per-sample advantages; `loss` holds the policy-gradient
loss that consumes them (torch imported inside, so both import without it). `base` holds what every trainer shares
(config base, run directory, checkpoints, resume, the `TRAINERS` registry); each trainer is one module registered
there.
"""
