"""The command line in the words people type: dtype short names, ``--json``, quiet libraries, and accelerate's
training figure under its own name beside ours (issue 34, item 5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from estimator.errors import BadOptionError
from estimator.options import DType, parse_bnb_compute_dtype, parse_dtypes
from testkit.cli_each import run_each

ROOT = Path(__file__).resolve().parent.parent
TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "TRANSFORMERS_VERBOSITY")}
    env.update(HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")  # no network at all
    return env


def run_together(*argvs: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
    """``python -m estimator ARGV`` for each argv, each in its own fresh process, the processes started at once."""
    procs = [subprocess.Popen([sys.executable, "-m", "estimator", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT, env=_env()) for argv in argvs]
    done = []
    for argv, proc in zip(argvs, procs, strict=True):
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        done.append(subprocess.CompletedProcess([sys.executable, "-m", "estimator", *argv], proc.returncode, out, err))
    return done


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("tiny")
    (folder / "config.json").write_text(json.dumps(TINY))
    return str(folder)


@pytest.mark.parametrize(("typed", "dtype"), [
    ("bf16", DType.BFLOAT16), ("BF16", DType.BFLOAT16), ("fp16", DType.FLOAT16), ("half", DType.FLOAT16), ("fp32", DType.FLOAT32),
    ("fp8", DType.FLOAT8), ("nf4", DType.INT4), ("4bit", DType.INT4), ("4-bit", DType.INT4), ("int4", DType.INT4),
    ("8bit", DType.INT8), ("8_bit", DType.INT8), ("bfloat16", DType.BFLOAT16),
])
def test_dtype_short_names_read_as_the_dtype(typed: str, dtype: DType) -> None:
    assert parse_dtypes(typed) == (dtype,)
    assert DType.parse(typed, option="dtypes") is dtype


def test_short_names_keep_order_and_drop_repeats_and_an_unknown_one_lists_them() -> None:
    assert parse_dtypes("bf16,bfloat16 fp32 4bit nf4") == (DType.BFLOAT16, DType.FLOAT32, DType.INT4)
    assert parse_bnb_compute_dtype("bf16") is DType.BFLOAT16
    with pytest.raises(BadOptionError) as caught:
        parse_dtypes("bf17")
    assert "bf17" in str(caught.value) and "bf16" in str(caught.value) and "4bit" in str(caught.value)


def test_json_is_format_json_and_aliases_name_rows_by_their_dtype(tiny: str) -> None:
    short, long = run_each((tiny, "--dtypes", "bf16", "fp32,4bit", "--json"),
                           (tiny, "--dtypes", "bfloat16", "float32,int4", "--format", "json"), env=_env())
    assert short.returncode == 0 and long.returncode == 0, short.stderr + long.stderr
    assert short.stdout == long.stdout
    assert [row["dtype"] for row in json.loads(short.stdout)["rows"]] == ["bfloat16", "float32", "int4"]


def test_library_warnings_stay_off_stderr_unless_debug(tiny: str) -> None:
    """A LoRA training run: transformers', torch's and peft's FutureWarnings and log records reach stderr only with --debug."""
    args = (tiny, "--mode", "training", "--lora-rank", "16", "--device", "cpu", "--dtypes", "bf16")
    quiet, loud = run_together(args, (*args, "--debug"))  # each its own fresh process (warn-once warnings), both at once
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert loud.returncode == 0 and "Warning" in loud.stderr  # the same run does warn: the quiet one hid it
    assert quiet.stdout == loud.stdout


def test_accelerate_training_figure_is_accelerates_own(tiny: str) -> None:
    """``accelerate_training_bytes`` is accelerate's ``estimate_training_usage`` (the largest part, as its
    ``estimate_command`` prints) of the model's float32 bytes; ``training_adam_bytes`` stays ours."""
    from accelerate.commands.estimate import estimate_training_usage

    from estimator import estimate

    result = estimate(tiny, dtypes=["float32", "float16", "bfloat16", "int8", "int4"])
    rows = {str(row.dtype): row for row in result.rows}
    fp32 = rows["float32"].total_bytes
    assert fp32 is not None
    for dtype in ("float32", "float16", "bfloat16"):
        accelerate = max(estimate_training_usage(fp32, dtype).values())
        assert rows[dtype].accelerate_training_bytes == accelerate
        assert result.to_dict()["rows"][list(rows).index(dtype)]["accelerate_training_bytes"] == accelerate
    assert max(estimate_training_usage(fp32, "int8").values()) == -1  # accelerate's N/A
    assert rows["int8"].accelerate_training_bytes is None and rows["int4"].accelerate_training_bytes is None
    # ours counts 16-bit weights and gradients beside the float32 master weights and AdamW states
    assert rows["bfloat16"].training_adam_bytes == rows["float32"].training_adam_bytes != rows["bfloat16"].accelerate_training_bytes
    assert "accelerate_training_bytes" in result.to_dataframe().columns
