"""`ttlearn train NAME --option value …`: one command per registered trainer, its options read from the trainer's
config (every field's description is its help), so a new trainer is one file in `ttlearn.train` and nothing here."""

from __future__ import annotations

import contextlib
import inspect
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, Literal, Optional

import typer
from pydantic.fields import FieldInfo

from ttlearn.cli.common import console, friendly, parse_options, progress_bar, styled
from ttlearn.registry import PluginError
from ttlearn.runs import RunDir
from ttlearn.train.base import TRAINERS, TrainConfig

train_app = typer.Typer(
    help="Train memory writers and agent policies by RL (needs the `train` extra). Rerun a command with the same "
    "--out to resume it.",
    no_args_is_help=True,
)

SHOWN_METRICS = (
    "loss",
    "reward_mean",
    "reward_per_trial",
    "success_rate",
    "success_any",
    "kl",
    "clip_fraction",
    "grad_norm",
    "eval_reward",
)


def headline(metrics: dict[str, Any]) -> str:
    """A step's headline metrics in one line. A per-turn list (MemoPilot's `reward_mean`) shows its mean: the turns
    hold equally many notes, so that is the step's mean."""
    shown = []
    for key in SHOWN_METRICS:
        value = metrics.get(key)
        if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
            value = sum(value) / len(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            shown.append(f"{key} {value:.3g}")
    return " ".join(shown)


@contextlib.contextmanager
def training_progress(steps: int) -> Iterator[Callable[[int, dict[str, Any]], None]]:
    """The progress bar of a training run, showing the headline metrics of the last step."""
    with progress_bar("training", steps) as update:

        def advance(step: int, metrics: dict[str, Any]) -> None:
            update(completed=step, last=headline(metrics))

        yield advance


def _parameter(name: str, field: FieldInfo) -> inspect.Parameter:
    """A typer option for one config field: lists are comma-separated, dicts repeated KEY=VALUE, literals named."""
    annotation, help_text = field.annotation, field.description or ""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1
    if optional:
        annotation = args[0]
    origin = typing.get_origin(annotation)
    default = ... if field.is_required() else field.get_default(call_default_factory=True)
    if origin is list:
        annotation, default = str, (default if default is ... else ",".join(map(str, default)))
        help_text += " Comma-separated."
    elif origin is dict:
        annotation, default = list[str], []
        help_text += " Repeat KEY=VALUE."
    elif origin is Literal:
        help_text += f" One of: {', '.join(map(str, typing.get_args(annotation)))}."
        annotation = str
    if optional:
        annotation = Optional[annotation]  # noqa: UP045 - typer reads Optional
    flag = "--" + name.replace("_", "-")
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=typer.Option(default, flag, help=help_text), annotation=annotation
    )


def _config(config_class: type[TrainConfig], values: dict[str, Any]) -> TrainConfig:
    """The validated config from the command line's values (comma lists and KEY=VALUE pairs unpacked)."""
    fields = config_class.model_fields
    for name, value in values.items():
        origin = typing.get_origin(fields[name].annotation)
        if origin is list and isinstance(value, str):
            values[name] = [part.strip() for part in value.split(",") if part.strip()]
        elif origin is dict:
            values[name] = parse_options(value, "--" + name.replace("_", "-"))
    return config_class(**values)


def _command(name: str) -> Callable[..., None]:
    trainer_class = TRAINERS.get(name)
    config_class = trainer_class.config_class

    def command(**values: Any) -> None:
        config = _config(config_class, values)
        with training_progress(config.steps) as advance:
            trainer = trainer_class(config, progress=advance)
            trainer.train()
        if trainer.step < config.steps:
            console.print(
                f"stopped after step {trainer.step}: {config.patience} evaluations in a row without a new best "
                "(--patience)"
            )
        console.print(styled("final: ", "", str(RunDir(config.out).final), "bold", f" — {trainer.next_command()}"))

    command.__name__ = f"train_{name}"
    command.__doc__ = inspect.getdoc(trainer_class)
    command.__signature__ = inspect.Signature([_parameter(n, f) for n, f in config_class.model_fields.items()])
    return friendly(command)


for _name in TRAINERS.names():
    try:
        train_app.command(_name)(_command(_name))
    except PluginError:  # a broken plug-in loses its command only; `ttlearn list` says why
        continue
