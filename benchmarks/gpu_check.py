"""The GPU check: the CUDA tests, a MemoPilot step by phase per writer shape, and both trainers run and resumed, on
random weights, offline, in one command of at most 8 minutes on one GPU. It writes one JSON of figures.

    python benchmarks/gpu_check.py --out gpu-check.json                          # on the GPU machine
    python benchmarks/gpu_check.py --device cpu --tiny --out /tmp/gpu-check.json  # the CPU rehearsal (the tests')

Random weights give timings and correctness, never learning: the models are built from the configs of real ones
(SmolLM2-135M, Qwen2.5-1.5B, Qwen2.5-7B, in benchmarks/gpu_shapes/) with their real tokenizers (shipped there,
xz-compressed), so every matrix has its real size and every prompt its real length, but what they write and play
is noise. No weights, no hub, no network. `--tiny` keeps the tokenizers and shrinks the layers, for the rehearsal.

In order, each part timed and recorded (a part that fails is recorded with its error, and the rest still runs):
  tests:     tests/llm/test_cuda.py under pytest (CUDA and the CPU agree; they skip without CUDA);
  step:      benchmarks/memopilot_step.py's `measure` at the development recipe's size (G 8 × 4 sequences × 2
             notes, 6 rounds, 24-token notes, 2 steps) for each writer shape: seconds by phase (write / play /
             update) and per note against the raw work, peak GPU memory. The player is the SmolLM2 shape through
             `hf:DIR?device=…` (bfloat16 on a GPU that supports it);
  train:     `ttlearn train memopilot` and `ttlearn train lamer` for one step on the SmolLM2 shape, then each
             resumed for a second (the CLI, in this process).
Shapes are taken in order while `--budget` seconds allow the last one's cost again; the JSON says which were
skipped. ttlearn imports pydantic, which the reference GPU machine lacks: docs/gpu.md says how to carry it.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
SHAPES = Path(__file__).resolve().parent / "gpu_shapes"
RANDOM_WEIGHTS = "random weights: these figures are timings and correctness, never learning"
TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
"""What `--tiny` changes in a shape: the layers. Vocabulary, tokenizer and key-value heads stay as shipped."""
TINY_STEP = {"group": 2, "sequences_per_step": 1, "games": 2, "rounds": 2, "max_completion_length": 8, "steps": 1}
WRITERS = ("smollm2-135m", "qwen2.5-1.5b", "qwen2.5-7b")
PLAYER = "smollm2-135m"


def shape_config(name: str, tiny: bool) -> dict[str, Any]:
    config = json.loads((SHAPES / f"{name}.json").read_text())
    if tiny:
        config.update(TINY, num_key_value_heads=1)
    return config


FROM_GGUF = {"qwen2.5": "qwen-coder"}
"""Families whose tokenizer.json is too large to commit (Qwen2.5's: 1.4 MB compressed): read from an embedded
model's GGUF, the same vocabulary, and kept beside the shipped files (ignored by git). `--prepare` writes them before
the check is carried to a machine that has no GGUF."""


def prepared_tokenizer(family: str) -> Path:
    """The folder of a family's tokenizer files, its tokenizer.json first built from its GGUF where none is shipped."""
    folder = SHAPES / "tokenizers" / family
    built = folder / "tokenizer.json"
    if family in FROM_GGUF and not built.exists():
        from transformers import AutoTokenizer

        from ttlearn.llm.models import model_path

        gguf = model_path(FROM_GGUF[family])
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        built.write_text(tokenizer.backend_tokenizer.to_str())
    return folder


def tokenizer_files(family: str, into: Path) -> None:
    """A model family's tokenizer, decompressed into a model directory."""
    for path in prepared_tokenizer(family).iterdir():
        target = into / path.name.removesuffix(".xz")
        target.write_bytes(lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes())


def random_model(name: str, tiny: bool, device: str, dtype: str, directory: Path) -> tuple[Any, Any]:
    """(model, tokenizer) of a shape with random weights made on `device`, the tokenizer's files in `directory`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = shape_config(name, tiny)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer_files(config.pop("tokenizer"), directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    config = AutoConfig.for_model(
        config.pop("model_type"), **config, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: a 7B model's random init on the CPU takes minutes
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    return model.eval(), tokenizer


def saved_model(name: str, tiny: bool, device: str, dtype: str, directory: Path) -> Path:
    """A shape's random model as an HF checkpoint directory (what `hf:DIR` and `--writer-base DIR` read)."""
    model, _ = random_model(name, tiny, device, dtype, directory)
    model.save_pretrained(directory)
    return directory


def environment(device: str) -> dict[str, Any]:
    import torch

    found: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("transformers", "peft", "accelerate", "pydantic"):
        try:
            found[package] = __import__(package).__version__
        except ImportError:
            found[package] = None
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        found.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            capability=f"{props.major}.{props.minor}",
            cuda=torch.version.cuda,
            bf16=torch.cuda.is_bf16_supported(including_emulation=False),
        )
    return found


def cuda_tests(folder: Path) -> dict[str, Any]:
    """tests/llm/test_cuda.py in a pytest subprocess: its counts from the junit report."""
    report = folder / "junit.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        + ["tests/llm/test_cuda.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    return {"returncode": done.returncode, **counts, "tail": done.stdout[-1500:] if done.returncode else ""}


def step_figures(name: str, args: argparse.Namespace, dtype: str, player: str, folder: Path) -> dict[str, Any]:
    """memopilot_step's figures with a writer of this shape, built in memory on the device."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from memopilot_step import development_config, measure

    from ttlearn.llm.hf import HFPolicy, LoraOptions

    config = development_config(
        player=player, writer_base=name, device=args.device, out=str(folder / f"step-{name}"),
        **(TINY_STEP | {"save_every": 1} if args.tiny else {}),
    )  # fmt: skip
    model, tokenizer = random_model(name, args.tiny, args.device, dtype, folder / f"tokenizer-{name}")
    lora = LoraOptions(r=config.lora_r, alpha=config.lora_alpha, target_modules=tuple(config.lora_targets))
    figures = measure(config, policy=HFPolicy(model, tokenizer, source=f"random:{name}", lora=lora))
    figures["parameters"] = sum(p.numel() for p in model.parameters())
    return figures


def train_and_resume(trainer: str, options: list[str], out: Path) -> dict[str, Any]:
    """`ttlearn train TRAINER` for one step, then again with --steps 2: the steps its metrics log then holds."""
    from ttlearn.cli import app

    seconds = []
    for steps in (1, 2):
        start = time.perf_counter()
        app(["train", trainer, *options, "--steps", str(steps), "--out", str(out)], standalone_mode=False)
        seconds.append(time.perf_counter() - start)
    logged = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    if logged != [1, 2] or not (out / "step_0002").is_dir():
        raise RuntimeError(f"{trainer}: the resumed run logged steps {logged}, expected [1, 2]")
    return {"steps_logged": logged, "first_s": seconds[0], "resumed_s": seconds[1]}


def timed(part: Callable[[], Any]) -> dict[str, Any]:
    """A part's result and seconds, or its error: one failing part does not hide the others' figures."""
    start = time.perf_counter()
    try:
        result = {"ok": True, "result": part()}
    except Exception as exc:  # noqa: BLE001 - recorded in the JSON, and the exit code says so
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    return {**result, "seconds": round(time.perf_counter() - start, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tiny", action="store_true", help="tiny layers (the CPU rehearsal)")
    parser.add_argument("--writers", default=",".join(WRITERS), help="writer shapes, in order")
    parser.add_argument("--budget", type=float, default=300, help="seconds the step part may take in all")
    parser.add_argument("--skip-tests", action="store_true", help="leave out the CUDA tests")
    parser.add_argument("--out", type=Path, help="the JSON of figures (required unless --prepare)")
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="only build the tokenizers read from GGUFs, for carrying to a GPU machine",
    )
    args = parser.parse_args()
    if args.prepare:
        for family in FROM_GGUF:
            print(prepared_tokenizer(family))
        return 0
    if args.out is None:
        parser.error("--out is required")
    missing = [m for m in ("torch", "transformers", "peft", "accelerate", "pydantic") if not _importable(m)]
    if missing:
        print(f"gpu_check: missing Python packages {', '.join(missing)}; docs/gpu.md says how to carry them")
        return 2
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible; the CPU rehearsal is --device cpu --tiny")
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the figures are IEEE float32 where float32 is used
    bf16 = args.device == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)
    dtype = "bfloat16" if bf16 else "float32"
    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    figures: dict[str, Any] = {
        "note": RANDOM_WEIGHTS,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": args.device,
        "dtype": dtype,
        "tiny": args.tiny,
        "environment": environment(args.device),
    }
    print(RANDOM_WEIGHTS)
    if not args.skip_tests:
        figures["cuda_tests"] = timed(lambda: cuda_tests(folder))
        print(f"cuda tests: {figures['cuda_tests']}")
    base = saved_model(PLAYER, args.tiny, args.device, dtype, folder / "base")
    player = f"hf:{base}?device={args.device}"
    figures["memopilot_step"], spent = {}, 0.0
    for name in args.writers.split(","):
        last = max((f["seconds"] for f in figures["memopilot_step"].values() if "seconds" in f), default=0.0)
        if spent + last > args.budget:
            figures["memopilot_step"][name] = {"skipped": f"budget: {spent:.0f} s spent of {args.budget:.0f}"}
            continue
        figures["memopilot_step"][name] = timed(lambda name=name: step_figures(name, args, dtype, player, folder))
        spent += figures["memopilot_step"][name]["seconds"]
        if args.device == "cuda":
            torch.cuda.empty_cache()  # the next writer shape starts from the player alone
        print(f"memopilot step, writer {name}: {json.dumps(figures['memopilot_step'][name])[:600]}")
    small = TINY_STEP if args.tiny else {"group": 4, "sequences_per_step": 1, "games": 2, "rounds": 3}
    memopilot = [
        "--device", args.device, "--writer-base", str(base), "--player", player, "--opponents", "biased",
        "--eval-every", "0", "--save-every", "1", "--max-completion-length", "8",
        *[a for k, v in small.items() if k not in ("steps", "max_completion_length")
          for a in (f"--{k.replace('_', '-')}", str(v))],
    ]  # fmt: skip
    lamer = [
        "--device", args.device, "--policy", str(base), "--env", "minesweeper", "--env-options", "turns=2",
        "--actions", "choices", "--tasks", "2", "--tasks-per-step", "1", "--group", "2", "--attempts", "2",
        "--reflection-tokens", "8", "--save-every", "1",
    ]  # fmt: skip
    figures["train"] = {
        "memopilot": timed(lambda: train_and_resume("memopilot", memopilot, folder / "train-memopilot")),
        "lamer": timed(lambda: train_and_resume("lamer", lamer, folder / "train-lamer")),
    }
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    parts = [figures.get("cuda_tests"), *figures["memopilot_step"].values(), *figures["train"].values()]
    failed = [p for p in parts if p and p.get("ok") is False]
    tests = figures.get("cuda_tests", {}).get("result", {})
    tests_failed = bool(tests) and (tests["failures"] or tests["errors"] or tests["returncode"] not in (0, 5))
    print(f"{RANDOM_WEIGHTS}\nwrote {args.out} in {figures['wall_s']} s; {len(failed)} parts failed")
    return 1 if failed or tests_failed else 0


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    sys.exit(main())
