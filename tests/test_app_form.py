"""Share links: parsing with notices (never raising), building, and the form's values."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from estimator_app import form
from estimator_app.form import FormState, from_form, from_query, share_link, to_query

FULL = FormState(
    model="meta-llama/Llama-3.1-8B",
    revision="0e9e39f249a16976918f6564b8830bc894c89659",
    library="transformers",
    dtypes=("bfloat16", "int4"),
    mode="training",
    batch=4,
    seq=2048,
    image=None,
    new_tokens=16,
    device="cpu",
    optimizer="sgd",
    pure16=True,
    checkpointing=True,
    lora=8,
    lora_targets=("q_proj", "v_proj", "model.layers.0.mlp.down_proj"),
    gpu="A100 80GB",
    gpu_memory="24GiB",
    ctx=8192,
    cache_type="q8_0",
    n_gpu_layers=20,
    gguf_file="Q4_K_M",
    gpu_memory_utilization=0.85,
    max_model_len=4096,
    max_num_seqs=64,
    max_num_batched_tokens=2048,
    kv_cache_dtype="fp8",
    block_size=32,
    gpus=8,
    nodes=2,
    strategy="zero3",
    offload="optimizer",
    tensor_parallel_size=2,
    pipeline_parallel_size=2,
    quantization="fp8",
    vllm_version="0.19",
    images=2,
    audio=12,
)


def _documented_link_order() -> list[str]:
    """docs/app.md's sentence "A link made by the app spells out all N parameters, in this order: ..." read as a list.

    The test checks the page against the document users read, so neither can drift without the other.
    """
    text = (Path(__file__).resolve().parent.parent / "docs" / "app.md").read_text(encoding="utf-8")
    match = re.search(r"A link made by the app spells out all (\d+) parameters, in this order: (.*?)\.\n", text)
    assert match, "docs/app.md no longer states the share link's parameters in order"
    names = re.findall(r"`([a-z0-9_]+)`", match.group(2))
    assert len(names) == int(match.group(1)), "docs/app.md's count of link parameters disagrees with its own list"
    return names


def test_link_spells_out_every_contract_parameter_in_order() -> None:
    query = to_query(FormState(model="gpt2"))
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
    assert names == _documented_link_order()
    assert dict(parse_qsl(query))["dtypes"] == "float32,float16,int8,int4"
    assert "seq=auto" in query and "lora=none" in query and "gpu=none" in query and "pure16=0" in query
    assert "&lora_targets=&" in query  # spelled out even when empty: peft's default targets


@pytest.mark.parametrize("state", [FULL, FormState(model="gpt2"), FormState(model="https://huggingface.co/org/name/tree/v1.0")])
def test_round_trip(state: FormState) -> None:
    parsed = from_query(parse_qsl(to_query(state), keep_blank_values=True))
    assert parsed.notices == []
    assert parsed.given
    assert parsed.state == state


def test_lora_targets_round_trip_through_a_link_and_the_form() -> None:
    state = FormState(model="mistralai/Mixtral-8x7B-v0.1", mode="training", lora=16, lora_targets=("q_proj", "k_proj", "w1"))
    query = to_query(state)
    assert "&lora=16&lora_targets=q_proj,k_proj,w1&" in query
    parsed = from_query(parse_qsl(query, keep_blank_values=True))
    assert parsed.notices == [] and parsed.state == state
    assert from_form(*form.to_fields(parsed.state)) == state  # link -> widgets -> the same request
    assert from_form(*form.to_fields(FULL)) == FULL
    assert state.estimate_kwargs()["lora_targets"] == "q_proj,k_proj,w1"
    assert FormState(model="gpt2").estimate_kwargs()["lora_targets"] is None  # empty: peft's defaults


def test_a_link_s_lora_targets_are_normalized_and_a_link_without_them_means_peft_s_defaults() -> None:
    parsed = from_query({"model": "gpt2", "lora": "8", "lora_targets": " q_proj , v_proj,,q_proj "})
    assert parsed.notices == [] and parsed.state.lora_targets == ("q_proj", "v_proj")
    assert from_query({"model": "gpt2", "lora_targets": ""}).state.lora_targets is None
    assert from_query({"model": "gpt2", "lora": "8"}).state.lora_targets is None  # a link made before the field


@pytest.mark.parametrize(
    "value",
    ["q_proj;v_proj", "q_proj v_proj", "<script>", "a/b", "q_proj\nv_proj", ",".join(f"m{i}" for i in range(21)), "x" * 201, "ünï"],
)
def test_malformed_lora_targets_in_a_link_are_ignored_with_a_notice(value: str) -> None:
    parsed = from_query([("model", "gpt2"), ("lora", "8"), ("lora_targets", value)])
    assert parsed.state == FormState(model="gpt2", lora=8)
    assert len(parsed.notices) == 1
    assert parsed.notices[0].startswith("Ignored lora_targets=") and "module names" in parsed.notices[0]
    assert len(parsed.notices[0]) < 250


def test_share_link_replaces_any_query_of_the_base() -> None:
    link = share_link("https://example.hf.space/?old=1#x", FormState(model="gpt2"))
    parts = urlsplit(link)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "example.hf.space", "/")
    assert dict(parse_qsl(parts.query))["model"] == "gpt2"
    assert "old" not in parts.query


def test_unknown_and_malformed_parameters_are_ignored_with_notices() -> None:
    parsed = from_query(
        [
            ("model", "gpt2"),
            ("batch", "-3"),
            ("mode", "dance"),
            ("dtypes", "float16,fp99,int4"),
            ("pure16", "maybe"),
            ("seq", "1e9"),
            ("gpu", "Voodoo 2"),
            ("colour", "red"),
            ("model", "other"),
            ("__theme", "dark"),
            ("revision", "../../etc"),
            ("lora", "x"),
        ]
    )
    state = parsed.state
    assert state.model == "gpt2"  # the first one counts
    assert state.dtypes == ("float16", "int4")
    assert (state.batch, state.mode, state.pure16, state.seq, state.gpu, state.revision, state.lora) == (
        1,
        "load",
        False,
        None,
        None,
        "main",
        None,
    )
    text = "\n".join(parsed.notices)
    for expected in (
        "batch='-3'",
        "mode='dance'",
        "'fp99'",
        "pure16='maybe'",
        "seq='1e9'",
        "gpu='Voodoo 2'",
        "unknown parameter 'colour'",
        "repeated 'model'",
        "revision='../../etc'",
        "lora='x'",
    ):
        assert expected in text
    assert "__theme" not in text
    assert len(parsed.notices) == 10


def test_every_dtype_bad_keeps_the_default_and_says_so() -> None:
    parsed = from_query({"dtypes": "nope"})
    assert parsed.state.dtypes == FormState().dtypes
    assert any("dtypes='nope'" in n for n in parsed.notices)


def test_no_parameters_means_nothing_to_run() -> None:
    parsed = from_query({})
    # the page's own defaults (bfloat16 ticked); a link without dtypes keeps the contract's (FormState's)
    assert not parsed.given and parsed.state == FormState(dtypes=form.PAGE_DTYPES) and parsed.notices == []
    assert "bfloat16" in form.PAGE_DTYPES and from_query({"model": "gpt2"}).state.dtypes == FormState().dtypes


def test_overlong_values_are_cut_in_notices() -> None:
    parsed = from_query({"x" * 500: "y", "batch": "9" * 500})
    assert all(len(n) < 200 for n in parsed.notices)


def test_from_form_maps_widgets_and_zero_means_auto() -> None:
    state = from_form(" gpt2 ", "", "auto", ["int4", "float32"], "inference", 2.0, 0, 0, 5, "cuda", "adamw", False, False, 0, "", "none", "", 0, "f16", "auto", "", 0.9, 0, 0, 0, "auto", 16, 1, 1, "none", "none", 1, 1, "none", "0.19", 0, 0, 0, "auto")
    assert state == FormState(model="gpt2", dtypes=("int4", "float32"), mode="inference", batch=2, new_tokens=5)
    assert state.estimate_kwargs()["revision"] is None
    assert "trust_remote_code" not in state.estimate_kwargs()
    assert state.estimate_kwargs()["gpu"] is None  # "none": no GPU to fit


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (("", "main", "auto", ["float32"]), "Type a model id"),
        (("gpt2", "main", "auto", []), "Tick at least one dtype"),
    ],
)
def test_from_form_refuses_with_a_friendly_message(values: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        from_form(*values, "load", 1, 0, 0, 0, "cuda", "adamw", False, False, 0, "", "none", "", 0, "f16", "auto", "", 0.9, 0, 0, 0, "auto", 16, 1, 1, "none", "none", 1, 1, "none", "0.19", 0, 0, 0, "auto")


def test_from_form_names_the_field_of_a_bad_number() -> None:
    with pytest.raises(ValueError, match="Batch size"):
        from_form("gpt2", "main", "auto", ["float32"], "load", 1.5, 0, 0, 0, "cuda", "adamw", False, False, 0, "", "none", "", 0, "f16", "auto", "", 0.9, 0, 0, 0, "auto", 16, 1, 1, "none", "none", 1, 1, "none", "0.19", 0, 0, 0, "auto")


def test_from_form_reads_lora_targets_and_names_the_field_of_bad_ones() -> None:
    def with_targets(targets: object) -> FormState:
        return from_form("gpt2", "main", "auto", ["float32"], "training", 1, 0, 0, 0, "cuda", "adamw", False, False, 8, targets, "none", "", 0, "f16", "auto", "", 0.9, 0, 0, 0, "auto", 16, 1, 1, "none", "none", 1, 1, "none", "0.19", 0, 0, 0, "auto")

    assert with_targets(" q_proj, v_proj ").lora_targets == ("q_proj", "v_proj")
    assert with_targets("").lora_targets is None and with_targets(None).lora_targets is None
    for bad in ("q_proj; v_proj", ",".join(f"m{i}" for i in range(21)), "y" * 201):
        with pytest.raises(ValueError, match=r"^LoRA targets must be module names .* at most 20 names and 200 characters; got ") as caught:
            with_targets(bad)
        assert len(str(caught.value)) < 250


def test_estimate_kwargs_are_accepted_by_the_core() -> None:
    from estimator.api import parse_options

    kwargs = FormState(model="gpt2").estimate_kwargs()
    kwargs.pop("revision")
    parse_options(**kwargs)  # load mode: every option valid and supported


def test_vocabularies_follow_the_core() -> None:
    from estimator.options import DType, Mode

    assert tuple(d.value for d in DType) == form.DTYPES
    assert tuple(m.value for m in Mode) == form.MODES


def test_gpu_and_gguf_fields_reach_the_core_and_a_link() -> None:
    state = FormState(model="gpt2", mode="inference", gpu="L4")
    assert state.estimate_kwargs()["gpu"] == "L4" and state.estimate_kwargs()["gpu_memory"] is None
    assert FormState(model="gpt2", gpu="L4", device="cpu").estimate_kwargs()["gpu"] is None  # no GPU for a CPU run
    typed = FormState(model="gpt2", gpu="L4", gpu_memory="20GiB").estimate_kwargs()
    assert typed["gpu"] is None and typed["gpu_memory"] == "20GiB"
    parsed = from_query(parse_qsl("model=a/b&gpu_memory=lots&n_gpu_layers=all&cache_type=q4_0&ctx=4096&gguf_file=Q8_0"))
    assert parsed.state.n_gpu_layers == -1 and parsed.state.cache_type == "q4_0" and parsed.state.ctx == 4096
    assert parsed.state.gguf_file == "Q8_0" and parsed.state.gpu_memory is None
    assert any("gpu_memory" in notice for notice in parsed.notices)


def test_several_gpus_reach_the_core() -> None:
    state = FormState(model="gpt2", mode="training", gpus=8, strategy="fsdp")
    kwargs = state.estimate_kwargs()
    assert (kwargs["gpus"], kwargs["nodes"], kwargs["strategy"], kwargs["offload"]) == (8, 1, "fsdp", "none")
    assert FormState(model="gpt2").estimate_kwargs()["strategy"] is None
    parsed = from_query(parse_qsl("model=a/b&mode=training&gpus=4&strategy=zero2&offload=optimizer"))
    assert (parsed.state.gpus, parsed.state.strategy, parsed.state.offload) == (4, "zero2", "optimizer") and parsed.notices == []


def test_one_tensor_parallel_control_and_old_tp_links_keep_their_answer() -> None:
    """An older link's ``strategy=tp&gpus=4`` (inference) asks the core exactly what ``tensor_parallel_size=4`` asks now."""
    old = from_query(parse_qsl("model=a/b&mode=inference&gpus=4&strategy=tp&seq=128"))
    new = from_query(parse_qsl("model=a/b&mode=inference&tensor_parallel_size=4&seq=128"))
    assert old.notices == [] and old.state == new.state and old.state.strategy == "none" and old.state.tensor_parallel_size == 4
    kwargs = old.state.estimate_kwargs()
    assert (kwargs["strategy"], kwargs["gpus"], kwargs["tensor_parallel_size"]) == ("tp", 4, 1)
    assert "strategy=none" in to_query(old.state) and "tensor_parallel_size=4" in to_query(old.state)
    serving = FormState(model="a/b", mode="serving", gpu="L4", tensor_parallel_size=2).estimate_kwargs()
    assert (serving["strategy"], serving["tensor_parallel_size"]) == (None, 2)  # serving: vLLM's own size
    assert "tp" not in form.STRATEGY_CHOICES  # the strategy dropdown no longer offers a second tp control
    form.check(FormState(model="a/b", mode="inference", tensor_parallel_size=2))
    with pytest.raises(ValueError, match="Tensor parallel size applies to running"):
        form.check(FormState(model="a/b", mode="training", tensor_parallel_size=2))


def test_docs_app_md_lists_the_link_s_parameters_from_the_code() -> None:
    from pathlib import Path

    from estimator_app.fields import FIELDS, params_markdown

    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "app.md").read_text().split())
    assert params_markdown() in text and f"all {len(FIELDS)} parameters" in text and "sixteen" not in text
