"""The request types: parsed once into small typed values, refused early, errors naming options structurally."""

from __future__ import annotations

import pytest
import torch

from estimator.errors import BadOptionError, Option, RemoteCodeRequiredError
from estimator.messages import CLI, Wording, user_message
from estimator.options import (
    DEFAULT_SEQ_LEN,
    Device,
    DType,
    HardwareSpec,
    InputShape,
    LoadSpec,
    Mode,
    Optimizer,
    Options,
    TrainingSpec,
    WorkSpec,
    parse_options,
)


def quoted(option: Option) -> str:
    return f"“{option.name.replace('_', ' ').capitalize()}”"


PAGE_LIKE = Wording(option=quoted, internal_hint="report it with the page's link")


def test_parse_groups_options_by_the_stage_they_shape() -> None:
    options = parse_options(dtypes="float32,int4", mode="training", batch_size="4", seq_len=128, device="cpu", pure_16bit=True)
    assert options == Options(
        load=LoadSpec(dtypes=(DType.FLOAT32, DType.INT4)),
        work=WorkSpec(mode=Mode.TRAINING, shape=InputShape(batch_size=4, seq_len=128), training=TrainingSpec(pure_16bit=True)),
        hardware=HardwareSpec(device=Device.CPU, cpu_threads=torch.get_num_threads()),  # the asking process's, when not given
    )
    assert parse_options(device="cpu", cpu_threads="3").hardware.cpu_threads == 3
    assert parse_options(device="cuda").hardware.cpu_threads is None
    with pytest.raises(BadOptionError, match="cpu-threads"):
        parse_options(device="cuda", cpu_threads=4)
    assert hash(options) == hash(parse_options(dtypes=["float32", "int4"], mode="TRAINING", batch_size=4, seq_len="128", device="cpu", pure_16bit=1))


def test_choice_parse_returns_the_enum_type() -> None:
    optimizer: Optimizer = Optimizer.parse("AdamW", option="optimizer")  # typed as Optimizer, no cast needed
    assert optimizer is Optimizer.ADAMW
    assert Mode.parse("inference", option="mode") is Mode.INFERENCE


def test_shaping_names_only_what_shaped_the_result() -> None:
    assert set(parse_options().shaping(None)) == {"library", "dtypes", "mode", "revision", "trust_remote_code"}
    inference = parse_options(mode="inference", max_new_tokens=8).shaping("abc")
    assert inference["seq_len"] == DEFAULT_SEQ_LEN and inference["max_new_tokens"] == 8 and inference["revision"] == "abc"
    assert "optimizer" not in inference
    training = parse_options(mode="training").shaping(None)
    assert training["optimizer"] == "adamw" and "max_new_tokens" not in training


@pytest.mark.parametrize(
    ("kwargs", "option", "cli_text"),
    [
        ({"seq_len": 0}, "seq_len", "--seq-len must be between 1 and 16,777,216; got 0."),
        ({"batch_size": "many"}, "batch_size", "--batch-size must be an integer; got 'many'."),
        ({"mode": "bogus"}, "mode", "--mode must be one of load, inference, training, serving; got 'bogus'."),
        ({"dtypes": ""}, "dtypes", "--dtypes needs at least one of"),
        ({"max_new_tokens": True}, "max_new_tokens", "--max-new-tokens must be an integer; got True."),
    ],
)
def test_bad_options_carry_the_option_and_each_adapter_words_it(kwargs: dict[str, object], option: str, cli_text: str) -> None:
    with pytest.raises(BadOptionError) as caught:
        parse_options(**kwargs)  # type: ignore[arg-type]  # deliberately wrong types
    exc = caught.value
    assert exc.option == option
    assert str(exc).startswith(cli_text) and exc.message == str(exc)
    assert user_message(exc) == (str(exc), 2)
    assert user_message(exc, CLI) == (str(exc), 2)
    page, status = user_message(exc, PAGE_LIKE)
    assert status == 2 and "--" not in page and page.startswith(quoted(Option(option)))


def test_unsupported_combinations_are_refused_before_any_work() -> None:
    with pytest.raises(BadOptionError, match=r"^--gpu asks whether the model fits a GPU, which needs --device cuda") as caught:
        parse_options(mode="inference", gpu="H100", device="cpu")
    assert caught.value.option == "gpu"
    with pytest.raises(BadOptionError, match=r"^--lora-targets needs --lora-rank") as bad:
        parse_options(mode="training", lora_targets="q_proj")
    assert bad.value.option == "lora_targets"
    parse_options(mode="inference", optimizer="sgd")  # the optimizer shapes training only
    training = parse_options(mode="training", optimizer="adamw8bit", gradient_checkpointing=True, lora_rank=16, lora_targets="q_proj, v_proj")
    assert training.shaping(None)["lora_targets"] == ["q_proj", "v_proj"] and training.shaping(None)["optimizer"] == "adamw8bit"


def test_message_parts_keep_braces_and_values_verbatim() -> None:
    exc = RemoteCodeRequiredError(["a {weird} name; run with ", Option("trust_remote_code"), " (read it first)."], model_id="x/y")
    assert str(exc) == "a {weird} name; run with --trust-remote-code (read it first)."
    assert exc.worded(lambda o: "<" + o.name + ">") == "a {weird} name; run with <trust_remote_code> (read it first)."
    assert exc.option == "trust_remote_code" and exc.model_id == "x/y"


def test_internal_errors_name_the_adapter_s_own_remedy() -> None:
    assert "--debug" in user_message(RuntimeError("boom"))[0]
    page, status = user_message(RuntimeError("boom"), PAGE_LIKE)
    assert status == 1 and "--debug" not in page and "page's link" in page


@pytest.mark.parametrize("timeout", [-1, 0, float("nan"), float("inf"), "soon", True])
def test_a_bad_timeout_is_refused_before_any_hub_call(timeout: object) -> None:
    """Found by bench/fuzz.py: ``--timeout=-1`` reached the HTTP client and ended in an internal error."""
    from estimator import estimate

    with pytest.raises(BadOptionError, match="^--timeout must be") as caught:
        estimate("openai-community/gpt2", timeout=timeout)  # type: ignore[arg-type]  # deliberately wrong
    assert caught.value.option == "timeout"
