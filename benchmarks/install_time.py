"""How long the README's install spends compiling llama-cpp-python under given CMake options, and whether a wheel built
so answers exactly and as fast as the installed one.

PyPI ships llama-cpp-python as source only, so `pip install ".[memrl]"` compiles it. For each `--variant` (the
CMAKE_ARGS), the script builds the wheel as that install does: `nice -n 19 pip wheel PACKAGE --no-deps --no-cache-dir
--no-binary NAME` with `CMAKE_BUILD_PARALLEL_LEVEL=--jobs`, and prints the build's CPU seconds (user + system of pip
and every compiler it waited for, from `os.wait4`'s rusage), its wall seconds, and CPU ÷ jobs, the wall to expect on
an idle machine with that many cores. CPU seconds are the robust measure on a shared machine; wall is what was seen.

With `--check MODEL.gguf` every wheel is installed into a throwaway venv (`--system-site-packages`, so only
llama-cpp-python differs) and a child process there loads the model and answers one prompt greedily; the same child
runs on the installed build, alternating `--repeats` times. It prints whether the reply and the prompt's last logits
are bit for bit the installed build's, and the decode speed of both (median tokens/s).

    python benchmarks/install_time.py --variant="-DGGML_NATIVE=OFF" --variant="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" \
        [--package llama-cpp-python==0.3.36] [--jobs 2] [--check ~/.cache/ttlearn/models/MODEL.gguf] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ANSWER = """
import hashlib, json, sys, time
import llama_cpp
m = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=512, n_threads=1, seed=0, verbose=False)
prompt = "-- SQLite: the names of singers older than 30, oldest first\\nSELECT"
m.eval(m.tokenize(prompt.encode(), add_bos=True))
logits = hashlib.sha1(m.scores[m.n_tokens - 1].tobytes()).hexdigest()
m.reset()
start = time.perf_counter()
out = m.create_completion(prompt, max_tokens=48, temperature=0.0)
wall = time.perf_counter() - start
tokens = out["usage"]["completion_tokens"]
print(json.dumps({"text": out["choices"][0]["text"], "logits": logits, "tok_s": tokens / wall,
                  "lib": llama_cpp.__file__}))
"""


def timed_build(package: str, no_binary: str, cmake_args: str, jobs: int, out: Path, isolation: bool) -> dict:
    """Build one wheel into `out`; its CPU seconds (this child and all it waited for) and wall seconds."""
    command = ["nice", "-n", "19", sys.executable, "-m", "pip", "wheel", package, "--no-deps", "--no-cache-dir"]
    command += ["--no-binary", no_binary, "-w", str(out)] + ([] if isolation else ["--no-build-isolation"])
    env = {**os.environ, "CMAKE_ARGS": cmake_args, "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs)}
    start = time.perf_counter()
    with open(out / "build.log", "w") as log:
        child = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the build with CMAKE_ARGS={cmake_args!r} failed; see {out / 'build.log'}")
    (wheel,) = out.glob("*.whl")
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall, "wheel": wheel}


def venv_with(wheel: Path, folder: Path) -> Path:
    """A venv on top of this interpreter's packages with `wheel` installed in it; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(folder)], check=True)
    python = folder / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)]
    subprocess.run(install, check=True)
    return python


def answer(python: Path | str, model: Path) -> dict:
    result = subprocess.run([str(python), "-c", ANSWER, str(model)], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", required=True, help='CMAKE_ARGS of one build: --variant="-D…"')
    parser.add_argument("--package", default="llama-cpp-python==0.3.36", help="what pip builds: a requirement or path")
    parser.add_argument("--no-binary", default="llama-cpp-python", help="the distribution pip must build from source")
    parser.add_argument("--jobs", type=int, default=2, help="CMAKE_BUILD_PARALLEL_LEVEL, and the cores of the estimate")
    parser.add_argument("--no-build-isolation", action="store_true", help="build with this environment's backends")
    parser.add_argument("--check", type=Path, help="a GGUF model: compare each wheel's reply with the installed build")
    parser.add_argument("--repeats", type=int, default=3, help="alternating answers per wheel for the speed")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="install-time-"))
    print(f"{args.package} · CMAKE_BUILD_PARALLEL_LEVEL={args.jobs} · nice 19 · load {os.getloadavg()[0]:.1f}")
    print("cpu_s      wall_s   idle estimate (cpu_s / jobs)   CMAKE_ARGS")
    builds = []
    for index, cmake_args in enumerate(args.variant):
        out = work / f"wheels-{index}"
        out.mkdir()
        build = timed_build(args.package, args.no_binary, cmake_args, args.jobs, out, not args.no_build_isolation)
        builds.append(build)
        print(f"{build['cpu_s']:<10.0f} {build['wall_s']:<8.0f} {build['cpu_s'] / args.jobs:<30.0f} {cmake_args}")
    base = builds[0]["cpu_s"]
    for cmake_args, build in zip(args.variant[1:], builds[1:]):
        print(f"cpu ratio {build['cpu_s'] / base:.2f} against the first: {cmake_args}")
    if args.check:
        pythons = [venv_with(build["wheel"], work / f"venv-{i}") for i, build in enumerate(builds)]
        speeds: dict[str, list[float]] = {"installed": [], **{v: [] for v in args.variant}}
        installed = answer(sys.executable, args.check)
        identical = True
        for _ in range(args.repeats):
            speeds["installed"].append(answer(sys.executable, args.check)["tok_s"])
            for cmake_args, python in zip(args.variant, pythons):
                reply = answer(python, args.check)
                if Path(reply["lib"]).resolve() == Path(installed["lib"]).resolve():
                    raise SystemExit(f"the venv {python} did not load its own llama_cpp")
                same = reply["text"] == installed["text"] and reply["logits"] == installed["logits"]
                speeds[cmake_args].append(reply["tok_s"])
                identical &= same
                if not same:
                    print(f"DIFFERENT reply or logits from {cmake_args!r}: {reply['text']!r}")
        print(f"installed build's reply: {installed['text']!r}")
        for name, values in speeds.items():
            print(f"{statistics.median(values):6.1f} tok/s (median of {len(values)})  {name}")
        print(f"replies identical (reply and the prompt's last logits, every wheel, every repeat): {identical}")


if __name__ == "__main__":
    main()
