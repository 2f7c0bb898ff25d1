"""`hf:` specs take a device and a dtype (`?device=…&dtype=…`), resolved as the trainers' `--device` / `--dtype`.

A tiny random model saved as an HF directory (tests/tiny_model.py) stands in for a real one: placement is the same
for any checkpoint, and the embedded models need not be converted for it.
"""

from __future__ import annotations

import pytest
from tiny_model import tiny_model_dir

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from ttlearn.cli import app  # noqa: E402
from ttlearn.llm import make_llm  # noqa: E402
from ttlearn.llm.hf import HFPolicy, LoraOptions  # noqa: E402

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny"))


def placement(policy: HFPolicy) -> tuple[str, torch.dtype]:
    return policy.device.type, next(policy.model.parameters()).dtype


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_the_spec_places_the_weights_as_asked(model_dir, dtype: str) -> None:
    policy = make_llm(f"hf:{model_dir}?device=cpu&dtype={dtype}")
    assert placement(policy) == ("cpu", getattr(torch, dtype))
    assert policy.complete([{"role": "user", "content": "hi"}], max_tokens=2).text is not None  # it plays there
    # replies are cached by spec: one that names another dtype must not share the float32 model's
    assert policy.spec == f"hf:{model_dir}" + ("" if dtype == "float32" else f"?device=cpu&dtype={dtype}")


@NO_GPU
def test_auto_is_the_cpu_in_float32_without_a_gpu(model_dir) -> None:
    assert placement(make_llm(f"hf:{model_dir}")) == ("cpu", torch.float32)
    assert placement(make_llm(f"hf:{model_dir}?device=auto&dtype=auto")) == ("cpu", torch.float32)


def test_an_adapter_loads_on_its_base_as_asked(model_dir, tmp_path) -> None:
    HFPolicy.from_source(str(model_dir), lora=LoraOptions(r=2)).save_adapter(tmp_path / "adapter")
    policy = make_llm(f"hf:{tmp_path / 'adapter'}?dtype=float64")
    assert placement(policy) == ("cpu", torch.float64) and policy.lora == LoraOptions(r=2)


@pytest.mark.parametrize(
    "options,message",
    [
        ("device=tpu", "device must be auto, cpu or cuda, got 'tpu'"),
        ("dtype=float16", "dtype must be auto, float32 or bfloat16 (float64 for numeric checks), got 'float16'"),
        ("colour=red", "unknown hf option 'colour'; known: device, dtype"),
        pytest.param("device=cuda", "no CUDA device visible; use hf:…?device=cpu or auto", marks=NO_GPU),
    ],
)
def test_a_bad_option_is_one_clear_error(model_dir, tmp_path, options: str, message: str) -> None:
    with pytest.raises(ValueError) as error:
        make_llm(f"hf:{model_dir}?{options}")
    assert str(error.value) == message
    result = CliRunner().invoke(app, ["run", "rps", "--llm", f"hf:{model_dir}?{options}", "--out", str(tmp_path / "r")])
    assert result.exit_code != 0 and "Traceback" not in result.output and message in " ".join(result.output.split())
