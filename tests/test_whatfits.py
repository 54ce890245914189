"""The "What fits my GPU?" logic (estimator_app.whatfits) over small datasets in the sweep's schema.

The figures of these datasets are made up for the filter logic (which rows are shown, in which
order, which link); the shipped dataset's figures are compared with the single-model answer in
``test_the_shipped_dataset_answers_as_the_single_estimate``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl

import pandas as pd
import pytest

from estimator.fit.gpus import find_gpu
from estimator_app import whatfits
from estimator_app.form import from_query
from estimator_app.whatfits import GiB, Query

RTX = find_gpu("RTX 4090").total_bytes


def _row(model: str, mode: str, needed: int | None, gpu: str | None = "RTX 4090", **extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "model": model, "revision": "abc", "library": "transformers", "architecture": "X", "dtype": "bfloat16", "mode": mode,
        "batch_size": None, "seq_len": None, "max_new_tokens": None, "optimizer": None, "lora_rank": None,
        "gradient_checkpointing": None, "pure_16bit": None, "device": "cuda", "gpu": gpu, "gpu_memory_bytes": None,
        "total_bytes": needed, "peak_bytes": None, "needed_bytes": needed, "fits": None if needed is None or gpu is None else needed <= RTX,
        "max_batch": None, "max_seq": None, "method": "stored", "error": None, "share_query": f"model={model}&dtypes=bfloat16&mode={mode}",
    }
    if mode == "training":
        row.update(batch_size=1, seq_len=2048, optimizer="adamw", gradient_checkpointing=False, pure_16bit=False, method="simulated")
    row.update(extra)
    return row


@pytest.fixture
def sweep(tmp_path: Path) -> whatfits.Sweep:
    rows = [
        _row("org/small", "load", 2 * GiB),
        _row("org/medium", "load", 20 * GiB),
        _row("org/large", "load", 30 * GiB),
        _row("org/large", "load", 30 * GiB, gpu="A100 80GB", fits=True),
        _row("org/broken", "load", None, error="config.json is malformed", method=None),
        _row("org/small", "training", 6 * GiB, max_batch=7, max_seq=9000),
        _row("org/small", "training", 3 * GiB, lora_rank=16, max_batch=20, max_seq=30000),
        _row("org/medium", "training", 40 * GiB, lora_rank=16),
        _row("org/small", "training", 9 * GiB, lora_rank=16, batch_size=4),
        _row("org/small", "training", 5 * GiB, lora_rank=16, gpu="H100 80GB"),
        _row("org/small", "training", 4 * GiB, lora_rank=16, gpu="L4"),
    ]
    path = tmp_path / "sweep.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return whatfits.load(str(path))


def test_a_listed_gpu_shows_the_models_that_fit_largest_first_with_links(sweep: whatfits.Sweep) -> None:
    found = whatfits.answer(sweep, Query(gpu="RTX 4090", use="load", dtype="bfloat16"))
    assert [m.split("]")[0][1:] for m in found.table["Model"]] == ["org/medium", "org/small"]
    assert found.table["Model"].iloc[0] == "[org/medium](?model=org/medium&dtypes=bfloat16&mode=load)"
    assert found.table["Free GiB"].tolist() == [round((RTX - 20 * GiB) / GiB, 2), round((RTX - 2 * GiB) / GiB, 2)]
    assert (found.fitting, found.considered) == (2, 3)
    assert "1 could not be estimated" in found.summary and "2 of 3 models fit RTX 4090" in found.summary


def test_a_typed_memory_compares_needed_bytes_and_leaves_the_gpu_s_own_answers_out(sweep: whatfits.Sweep) -> None:
    found = whatfits.answer(sweep, Query(memory="32GiB", use="load", dtype="bfloat16"))
    assert [m.split("]")[0][1:] for m in found.table["Model"]] == ["org/large", "org/medium", "org/small"]
    lora = whatfits.answer(sweep, Query(memory="5GiB", use="lora", dtype="bfloat16", scenario="batch 1 x 2048 tokens, rank 16, adamw"))
    # the RTX 4090 row (3 GiB, max batch 20) is taken before the Hopper one and the batch/sequence, which depend on the GPU, are left out
    assert lora.table["Needed GiB"].tolist() == [3.0] and lora.table["Max batch"].isna().all()


def test_uses_and_scenarios_split_training_into_lora_and_full(sweep: whatfits.Sweep) -> None:
    assert sweep.uses() == ["load", "lora", "full"]
    assert sweep.scenarios("lora") == ["batch 1 x 2048 tokens, rank 16, adamw", "batch 4 x 2048 tokens, rank 16, adamw"]
    full = whatfits.answer(sweep, Query(gpu="RTX 4090", use="full", dtype="bfloat16"))
    assert full.table[["Max batch", "Max seq"]].values.tolist() == [[7, 9000]]
    bigger = whatfits.answer(sweep, Query(gpu="RTX 4090", use="lora", dtype="bfloat16", scenario="batch 4 x 2048 tokens, rank 16, adamw"))
    assert bigger.table["Needed GiB"].tolist() == [9.0]


def test_the_name_filter_and_the_row_limit(sweep: whatfits.Sweep) -> None:
    assert whatfits.answer(sweep, Query(gpu="RTX 4090", use="load", dtype="bfloat16", filter="MED")).table["Model"].str.contains("medium").all()
    capped = whatfits.answer(sweep, Query(gpu="RTX 4090", use="load", dtype="bfloat16"), limit=1)
    assert len(capped.table) == 1 and capped.fitting == 2 and "the 1 largest shown" in capped.summary


def test_bad_input_is_refused_with_what_to_do(sweep: whatfits.Sweep, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="24GiB"):
        whatfits.answer(sweep, Query(memory="lots", use="load"))
    with pytest.raises(ValueError, match="not a GPU we know"):
        whatfits.answer(sweep, Query(gpu="Voodoo 2", use="load"))
    with pytest.raises(whatfits.DatasetError, match="ESTIMATOR_SWEEP_DATASET"):
        whatfits.load(str(tmp_path / "missing.parquet"))
    pd.DataFrame({"model": ["a"]}).to_parquet(tmp_path / "thin.parquet")
    with pytest.raises(whatfits.DatasetError, match="lacks the columns .*needed_bytes"):
        whatfits.load(str(tmp_path / "thin.parquet"))


def test_the_tab_s_link_round_trips_and_the_model_form_ignores_it() -> None:
    query = Query(gpu="A100 80GB", memory=None, use="lora", dtype="int4", scenario="batch 1 x 2048 tokens, rank 16, adamw", filter="llama")
    text = whatfits.to_params(query)
    assert [name for name, _ in parse_qsl(text, keep_blank_values=True)] == list(whatfits.PARAMS)
    assert whatfits.from_params(dict(parse_qsl(text, keep_blank_values=True))) == query
    assert whatfits.from_params({"model": "gpt2"}) is None
    parsed = from_query(parse_qsl(text, keep_blank_values=True))
    assert parsed.notices == [] and not parsed.given


def test_a_sweep_folder_is_read_from_its_data_parts(tmp_path: Path) -> None:
    (tmp_path / "out" / "data").mkdir(parents=True)
    for i in range(2):
        pd.DataFrame([_row(f"org/m{i}", "load", GiB)]).to_parquet(tmp_path / "out" / "data" / f"part-{i}.parquet")
    assert sorted(whatfits.load(str(tmp_path / "out")).frame["model"]) == ["org/m0", "org/m1"]
    assert whatfits.source_from_env({}) == str(whatfits.SHIPPED)
    assert whatfits.source_from_env({whatfits.ENV: "org/name"}) == "org/name"


def test_the_shipped_dataset_answers_as_the_single_estimate(hub_server: str) -> None:
    """A row of the dataset the app ships is the command line's answer for the same options (load, RTX 4090)."""
    import json
    import subprocess
    import sys

    from testkit.hub_process import REPO_ROOT, hub_env

    sweep = whatfits.load(str(whatfits.SHIPPED))
    frame = sweep.frame
    row = frame[(frame["model"] == "openai-community/gpt2") & (frame["use"] == "load") & (frame["dtype"] == "bfloat16")
                & (frame["gpu"] == "RTX 4090")].iloc[0]
    done = subprocess.run([sys.executable, "-m", "estimator", "openai-community/gpt2", "--revision", row["revision"], "--dtypes", "bfloat16",
                           "--gpu", "RTX 4090", "--format", "json"], capture_output=True, text=True, cwd=REPO_ROOT, env=hub_env(hub_server),
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    cli = json.loads(done.stdout)["rows"][0]
    assert (row["total_bytes"], row["needed_bytes"], bool(row["fits"])) == (cli["total_bytes"], cli["fit"]["needed_bytes"], cli["fit"]["fits"])
    shown = whatfits.answer(sweep, Query(gpu="RTX 4090", use="load", dtype="bfloat16", filter="gpt2")).table.iloc[0]
    assert shown["Needed GiB"] == round(cli["fit"]["needed_bytes"] / GiB, 2) and shown["Method"] == cli["method"]


def test_a_model_that_failed_for_another_gpu_only_is_not_counted_as_failed(tmp_path: Path) -> None:
    rows = [_row("org/a", "load", GiB), _row("org/a", "load", None, gpu="A100 80GB", error="ran past the time limit", method=None),
            _row("org/b", "load", None, error="config.json is malformed", method=None)]
    pd.DataFrame(rows).to_parquet(tmp_path / "s.parquet")
    sweep = whatfits.load(str(tmp_path / "s.parquet"))
    on_rtx = whatfits.answer(sweep, Query(gpu="RTX 4090", use="load", dtype="bfloat16"))
    assert (on_rtx.fitting, on_rtx.considered) == (1, 1) and "; 1 could not be estimated" in on_rtx.summary  # org/b only
    typed = whatfits.answer(sweep, Query(memory="8GiB", use="load", dtype="bfloat16"))
    assert typed.fitting == 1 and "; 1 could not be estimated" in typed.summary


def test_a_hub_dataset_named_by_the_setting_is_read_back(hub_server: str, tmp_path: Path) -> None:
    """The shipped dataset uploaded to the stand-in as a dataset repo; ``ESTIMATOR_SWEEP_DATASET=ORG/NAME`` reads it
    through ``snapshot_download`` and answers as from the local file; an unknown repo gets the setting's message."""
    import json
    import subprocess
    import sys

    from testkit.hub_process import REPO_ROOT, hub_env

    code = (
        "import json, os\n"
        "from huggingface_hub import HfApi\n"
        "from estimator_app import whatfits\n"
        "api = HfApi()\n"
        "api.create_repo('standin-user/page-fits', repo_type='dataset', exist_ok=True)\n"
        "api.upload_file(path_or_fileobj=str(whatfits.SHIPPED), path_in_repo='data/part-0.parquet', repo_id='standin-user/page-fits',"
        " repo_type='dataset')\n"
        "sweep = whatfits.load(whatfits.source_from_env())\n"
        "found = whatfits.answer(sweep, whatfits.Query(gpu='RTX 4090', use='load', dtype='bfloat16'))\n"
        "try:\n"
        "    whatfits.load('standin-user/no-such-dataset')\n"
        "    missing = ''\n"
        "except whatfits.DatasetError as exc:\n"
        "    missing = str(exc)\n"
        "print(json.dumps({'rows': len(sweep.frame), 'fitting': found.fitting, 'missing': missing}))\n"
    )
    env = {**hub_env(hub_server, tmp_path / "hf_home"), "HF_TOKEN": "hf_standin_user", "ESTIMATOR_SWEEP_DATASET": "standin-user/page-fits"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    local = whatfits.load(str(whatfits.SHIPPED))
    assert got["rows"] == len(local.frame)
    assert got["fitting"] == whatfits.answer(local, Query(gpu="RTX 4090", use="load", dtype="bfloat16")).fitting
    assert "no-such-dataset" in got["missing"] and whatfits.ENV in got["missing"]


def test_a_failed_simulation_or_a_setting_past_the_model_is_never_listed_as_fitting(tmp_path: Path) -> None:
    """bert-base-cased at 2048 tokens: the formula's 0.6 GiB fits any GPU, but its note says the simulation failed
    because 2048 is past its 512 positions; the row is left out and the summary names it."""
    failed = ("simulation failed (RuntimeError: The expanded size of the tensor (2048) must match the existing size (512)); formula used; "
              "warning: sequence length 2,048 is longer than the model's 512 positions (max_position_embeddings)")
    rows = [_row("org/ok", "training", 3 * GiB, lora_rank=16, notes="peak in phase: optimizer_step"),
            _row("google-bert/bert-base-cased", "training", GiB, lora_rank=16, method="formula", notes=failed),
            _row("org/long", "training", GiB, lora_rank=16, notes="warning: sequence length 2,048 is longer than the model's 1,024 positions")]
    pd.DataFrame(rows).to_parquet(tmp_path / "s.parquet")
    sweep = whatfits.load(str(tmp_path / "s.parquet"))
    for query in (Query(use="lora"), Query(use="lora", memory="80GiB")):
        found = whatfits.answer(sweep, query)
        assert [m.split("]")[0][1:] for m in found.table["Model"]] == ["org/ok"]
        assert "2 not listed because their simulation failed or the setting is past what they can run" in found.summary
        assert "google-bert/bert-base-cased" in found.summary


def test_the_tab_names_its_dataset_and_how_to_use_a_larger_one(sweep: whatfits.Sweep) -> None:
    text = sweep.describe()
    assert "4 models" in text and "GPUs swept: A100 80GB, H100 80GB, L4, RTX 4090" in text
    assert "ESTIMATOR_SWEEP_DATASET" in text and "Hub dataset ORG/NAME (read with huggingface_hub)" in text
    shipped = whatfits.load(str(whatfits.SHIPPED)).describe()
    assert shipped.startswith("Showing the small sample dataset shipped with the app") and "made 20" in shipped


def test_qlora_checkpointing_and_serving_rows_in_words(tmp_path: Path) -> None:
    plan = ("KV cache (auto, 36,864 bytes per token): 37,518 blocks of 16 tokens; 600,288 tokens; maximum concurrency for 1,024 "
            "tokens per request: 586.22x (64 blocks per request); max_num_seqs 256, max_num_batched_tokens 2,048")
    rows = [_row("org/a", "training", 3 * GiB, lora_rank=16, dtype="int4"),
            _row("org/a", "training", 2 * GiB, lora_rank=16, dtype="int4", gradient_checkpointing=True),
            _row("org/a", "serving", None, fits=True, notes=plan, peak_bytes=20 * GiB, total_bytes=GiB, method="simulated")]
    pd.DataFrame(rows).to_parquet(tmp_path / "s.parquet")
    sweep = whatfits.load(str(tmp_path / "s.parquet"))
    qlora = whatfits.answer(sweep, Query(use="lora", dtype="int4", checkpointing=True))
    assert "QLoRA: LoRA adapters over int4" in qlora.summary and qlora.query.scenario is not None and "checkpointing" in qlora.query.scenario
    assert list(qlora.table["Needed GiB"]) == [2.0]
    assert whatfits.answer(sweep, Query(use="lora", dtype="int4", checkpointing=False)).query.scenario == "batch 1 x 2048 tokens, rank 16, adamw"
    served = whatfits.answer(sweep, Query(use="serving"))
    assert list(served.table.columns) == list(whatfits.SERVING_COLUMNS) and "Peak GiB" not in served.table.columns
    row = served.table.iloc[0]
    assert (row["KV cache tokens"], row["Requests at once"], row["Max model len"], row["vLLM starts"], row["Max seqs"],
            row["Max batched tokens"]) == (600288, 586.22, 1024, "yes", 256, 2048)
    assert whatfits.from_params({"fits_checkpointing": "1"}) == Query(checkpointing=True)
    assert whatfits.from_params({"fits_use": "lora"}) == Query(use="lora")  # a link from before the parameter: either


def test_a_bad_size_is_worded_for_the_tab_not_the_command_line(sweep: whatfits.Sweep) -> None:
    with pytest.raises(ValueError) as caught:
        whatfits.answer(sweep, Query(memory="lots", use="load"))
    assert str(caught.value).startswith("“Or its memory” must be a size") and "--" not in str(caught.value)


def test_the_speed_column_is_the_sweep_s_tokens_per_second_on_the_gpu_asked(tmp_path: Path) -> None:
    """``Tok/s (roofline)``: the swept row's decode tokens/s (inference) or training tokens/s, only where the row was
    swept on the GPU asked (another GPU's speed is not this one's); a dataset without the speed columns reads as empty."""
    rows = [
        _row("org/a", "inference", 2 * GiB, decode_tokens_per_second=41.23, train_tokens_per_second=None),
        _row("org/b", "inference", 3 * GiB, decode_tokens_per_second=None, train_tokens_per_second=None),
        _row("org/a", "training", 6 * GiB, decode_tokens_per_second=None, train_tokens_per_second=2967.04),
    ]
    path = tmp_path / "sweep.parquet"
    pd.DataFrame(rows).to_parquet(path)
    sweep = whatfits.load(str(path))
    inference = whatfits.answer(sweep, Query(gpu="RTX 4090", use="inference", dtype="bfloat16"))
    assert list(inference.table.columns) == list(whatfits.COLUMNS)
    assert inference.table[whatfits.SPEED].tolist()[1] == 41.2 and pd.isna(inference.table[whatfits.SPEED].tolist()[0])
    full = whatfits.answer(sweep, Query(gpu="RTX 4090", use="full", dtype="bfloat16"))
    assert full.table[whatfits.SPEED].tolist() == [2967.0]
    typed = whatfits.answer(sweep, Query(memory="24GiB", use="inference", dtype="bfloat16"))
    assert typed.table[whatfits.SPEED].isna().all()
