"""Reinforcement learning over memory writers (MemoPilot) and agent policies (LaMer).

`advantages` holds the numpy maths that turns rewards into per-sample advantages; `loss` holds the torch policy-gradient
loss that consumes them. They are separate so the advantage maths imports without torch.
"""
