"""Simulated CPU peaks of vision-language and speech models against the allocator, the full grid.

Every case of ``testkit.multimodal_cases`` (tiny configs of each family), inference (``generate``
with 4 new tokens) and training (two AdamW steps, labels over text and image tokens), at 1 and 2
images (vision-language), two audio lengths (speech) or two protein lengths (protein-text); each measurement and each simulation in a
fresh process (``testkit.multimodal_truth``). Writes ``bench/results/multimodal_accuracy.md``.

    .venv/bin/python -m bench.multimodal_accuracy            # the full grid (about 10 minutes on 2 cores)
    .venv/bin/python -m bench.multimodal_accuracy llava gemma3   # these cases' rows replaced in the results file
    .venv/bin/python -m bench.multimodal_accuracy --smoke    # the first case, inference, 1 image; nothing written (CI)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from testkit.audio_cases import AUDIO_SECONDS, all_cases
from testkit.audio_encoder_truth import ENCODER_CASES, ENCODER_SECONDS
from testkit.multimodal_truth import Job, run_jobs
from testkit.video_cases import VIDEO_FRAMES

SPEECH_SECONDS = {"whisper": (5.0, 30.0), "speech_to_text": (5.0, 12.0), **AUDIO_SECONDS, **ENCODER_SECONDS}
PROTEIN_RESIDUES = {"evolla": (32, 256)}  # protein-text cases: the protein's residues (= seq_len: the text's words too)
ONE_IMAGE = {"florence2", "fuyu", "blip-2", "instructblip"}  # captioners, Fuyu, BLIP-2 take one image per prompt (two are refused)
OUT = Path(__file__).parent / "results" / "multimodal_accuracy.md"


def grid(cases: list[str]) -> list[tuple[str, str, int, float]]:
    rows = []
    for case in cases:
        for mode in ("inference", "training"):
            if case in SPEECH_SECONDS:
                rows += [(case, mode, 0, s) for s in SPEECH_SECONDS[case]]
            elif case in PROTEIN_RESIDUES:  # the "images" slot carries the protein's residues
                rows += [(case, mode, n, 0.0) for n in PROTEIN_RESIDUES[case]]
            elif case in VIDEO_FRAMES:  # one video per prompt: the "images" slot carries its frames
                rows += [(case, mode, n, 0.0) for n in VIDEO_FRAMES[case]]
            else:
                rows += [(case, mode, n, 0.0) for n in ((1,) if case in ONE_IMAGE else (1, 2))]
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    smoke = "--smoke" in argv
    cases = [a for a in argv if a != "--smoke"] or [*all_cases(), *ENCODER_CASES, *VIDEO_FRAMES]  # ENCODER_CASES: speech encoders / CTC
    rows = grid(cases)
    if smoke:
        rows = rows[:1]
    jobs: list[Job] = [(kind, *row) for row in rows for kind in ("truth", "sim")]
    start = time.perf_counter()
    results = run_jobs(jobs)
    lines = ["# Multimodal peaks: simulated vs the CPU allocator", "",
             "`.venv/bin/python -m bench.multimodal_accuracy` (each run in a fresh process; truth: torch.profiler's "
             "\"Total Allocated\" maximum over the work, the model built inside the profile; inference = `generate` with "
             "4 new tokens, training = two AdamW steps). Tiny configs: `testkit/multimodal_cases.py`.", "",
             "| case | mode | images / audio | inputs | measured (bytes) | simulated (bytes) | error |",
             "|---|---|---|---|---:|---:|---:|"]
    worst = 0.0
    for case, mode, images, seconds in rows:
        truth, sim = results[("truth", case, mode, images, seconds)], results[("sim", case, mode, images, seconds)]
        what = (f"{seconds:g} s" if seconds else f"{images} video frames" if case in VIDEO_FRAMES
                else f"protein of {images} residues + {images} words" if case in PROTEIN_RESIDUES
                else f"{images} image{'s' if images > 1 else ''}")
        if isinstance(truth, dict) and isinstance(sim, dict) and sim["method"] == "simulated":
            error = (sim["peak_bytes"] - truth["peak_bytes"]) / truth["peak_bytes"]
            worst = max(worst, abs(error))
            inputs = truth["inputs"].split(" (")[0]
            lines.append(f"| {case} | {mode} | {what} | {inputs} | {truth['peak_bytes']:,} | {sim['peak_bytes']:,} | {error:+.2%} |")
        else:
            lines.append(f"| {case} | {mode} | {what} | failed | {truth if not isinstance(truth, dict) else ''} | "
                         f"{sim if not isinstance(sim, dict) else sim['notes'][0][:200]} | |")
    lines += ["", f"Worst absolute error: {worst:.2%} over {len(rows)} cases ({time.perf_counter() - start:.0f} s on this machine)."]
    print("\n".join(lines))
    if smoke:
        return 1 if any("| failed |" in line for line in lines) else 0
    if argv:  # some cases: their rows replace theirs in the results file, the other cases' rows are kept
        lines = _merged(lines, set(cases))
    OUT.write_text("\n".join(lines) + "\n")
    return 0


def _merged(lines: list[str], cases: set[str]) -> list[str]:
    """``lines`` (the report of a run of ``cases``) with the other cases' rows of the results file kept, and
    the worst error and count over all rows."""
    def is_row(line: str) -> bool:
        return line.startswith("| ") and not line.startswith("| case ")

    old = OUT.read_text().splitlines() if OUT.exists() else []
    new = [line for line in lines if is_row(line)]
    table = [line for line in old if is_row(line) and line.split(" | ")[0][2:] not in cases] + new
    errors = [abs(float(line.rstrip(" |").rsplit("| ", 1)[-1].rstrip("%"))) for line in table if line.endswith("% |")]
    head = [line for line in lines[:6] if not is_row(line)]
    return [*head, *table, "", f"Worst absolute error: {max(errors, default=0.0):.2f}% over {len(table)} cases "
            f"(this file merges runs; the last, of {', '.join(sorted(cases))}: {len(new)} cases, "
            f"{lines[-1].rsplit('(', 1)[-1]}"]


if __name__ == "__main__":
    raise SystemExit(main())
