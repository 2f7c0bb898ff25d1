"""Text environments. Each module registers its classes in `ENVS`; `make_env` builds one by name."""

from ttlearn.envs.base import ENVS, Env, make_env

__all__ = ["ENVS", "Env", "make_env"]
