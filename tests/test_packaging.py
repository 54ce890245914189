"""The Space and Docker packaging refer to files that exist and install the same requirements.

`docker build` cannot run here, so this checks what can be checked without it: every COPY source
exists, the image installs the Space's own requirements.txt, the README front matter is a valid
Space configuration that names app.py and the OAuth scope posting needs, and its Gradio version is
the one requirements.txt pins.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def front_matter() -> dict[str, object]:
    text = (ROOT / "README.md").read_text()
    assert text.startswith("---\n")
    block = text.split("---\n", 2)[1]
    values: dict[str, object] = {}
    key = ""
    for line in block.splitlines():
        if line.startswith("  - "):
            values.setdefault(key, [])
            assert isinstance(values[key], list)
            values[key].append(line[4:].strip())  # type: ignore[union-attr]
        elif ":" in line:
            key, _, value = line.partition(":")
            values[key.strip()] = value.strip().strip('"') or []
    return values


def test_dockerfile_copies_files_that_exist_and_installs_the_space_requirements() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines() if line.strip() and not line.startswith("#")]
    copies = [shlex.split(line)[1:] for line in lines if line.startswith("COPY")]
    assert copies
    for args in copies:
        sources = [a for a in args if not a.startswith("--")][:-1]
        for source in sources:
            assert (ROOT / source).exists(), source
    installs = [line for line in lines if line.startswith("RUN") and "pip install" in line]
    assert installs and all("-r requirements.txt" in line for line in installs)
    cmd = next(line for line in lines if line.startswith("CMD"))
    assert "app.py" in cmd and (ROOT / "app.py").exists()


def test_space_front_matter() -> None:
    values = front_matter()
    assert values["sdk"] == "gradio" and values["app_file"] == "app.py" and (ROOT / "app.py").exists()
    assert values["hf_oauth"] == "true" and "write-discussions" in values["hf_oauth_scopes"]  # type: ignore[operator]
    pinned = re.search(r"^gradio(?:\[[^\]]+\])?==([\d.]+)", (ROOT / "requirements.txt").read_text(), flags=re.M)
    assert pinned is not None
    assert str(values["sdk_version"]).startswith(pinned.group(1).rstrip(".*").rstrip("."))


def test_requirements_install_on_their_own() -> None:
    """A Space installs requirements.txt alone: it must not refer to dev files or local paths."""
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            assert not line.startswith(("-r", "-e", ".", "/")), line
            assert re.match(r"^[A-Za-z0-9_.\-]+(\[[a-z,]+\])?([=<>!~]=?[\w.*]+)?$", line), line
