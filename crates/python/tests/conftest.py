"""Shared fixtures: the models the tests open and the `switchyard` command to compare with.

`cargo xtask test-python` builds the package and runs these tests with SWITCHYARD_BIN set to the
`switchyard` binary of the same build; the real model comes from `cargo xtask fetch-models`.
"""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
TINY = ROOT / "crates" / "models" / "tests" / "fixtures" / "tiny"
MINILM_EXPECTED = ROOT / "crates" / "models" / "tests" / "fixtures" / "minilm.json"


def tiny(name: str) -> str:
    """A tiny generated checkpoint of crates/models/tests/fixtures."""
    return str(TINY / name)


@pytest.fixture(scope="session")
def minilm() -> str:
    """The real all-MiniLM-L6-v2, fetched by `cargo xtask fetch-models`."""
    root = pathlib.Path(os.environ.get("SWITCHYARD_MODELS_DIR", ROOT / ".cache" / "models"))
    path = root / "all-MiniLM-L6-v2"
    if not (path / "model.safetensors").is_file():
        pytest.fail(f"{path} is missing: run `cargo xtask fetch-models` first")
    return str(path)


@pytest.fixture(scope="session")
def minilm_expected() -> dict:
    """sentence-transformers' embeddings of the real model (crates/models/tests/fixtures)."""
    return json.loads(MINILM_EXPECTED.read_text())


@pytest.fixture(scope="session")
def cli():
    """Runs `switchyard ARGS` with `stdin`, returning its stdout's JSON lines."""
    binary = os.environ.get("SWITCHYARD_BIN")
    if not binary:
        pytest.fail("SWITCHYARD_BIN is not set: run these tests with `cargo xtask test-python`")

    def run(args, stdin: str):
        done = subprocess.run(
            [binary, *args], input=stdin, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    return run
