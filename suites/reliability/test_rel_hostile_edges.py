"""Options and paths at their limits (issue 28, class 9, low): each a user mistake, so exit 2
with one line, or a fact recorded in words.

- a path past NAME_MAX (255 bytes a component) or PATH_MAX (4096): exit 2 (before: exit 1, "in
  the harness failed (File name too long)");
- a MemoryError's hint names every cause (the model, its input shapes, --model-size,
  --processes), not --model-size alone (before: it named --model-size when --shape was the cause);
- `cache info` / `cache clear` on a HARNESS_CACHE_DIR that is a file: exit 2 (before: "does not
  exist yet", exit 0);
- a size, count, timeout or threshold in fullwidth (or other non-ASCII) digits: exit 2 (before:
  Python's int() and float() took "２５６" as 256);
- a --session-config key no library of this ONNX Runtime names: the run records it as
  unverified and says so (before: recorded as if applied; ORT accepts any key).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rel_support import ROOT, harness_env, one_line_error, run_args, run_quick

LONG_NAME = "n" * 300
LONG_PATH = "/tmp/" + "/".join(["p" * 200] * 25)


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--model-size", "8MiB", "--out", f"/tmp/{LONG_NAME}"),
        ("run", "--model-size", "8MiB", "--out", LONG_PATH),
        ("run", "--model-size", "8MiB", "--cache-dir", f"/tmp/{LONG_NAME}"),
        ("run", "--model-size", "8MiB", "--history", f"/tmp/{LONG_NAME}.csv"),
        ("run", "--model", f"/tmp/{LONG_NAME}.onnx"),
        ("report", f"/tmp/{LONG_NAME}"),
        ("cache", "info", "--cache-dir", f"/tmp/{LONG_NAME}"),
    ],
    ids=["out-name", "out-path", "cache-dir", "history", "model", "report", "cache-info"],
)
def test_a_name_too_long_is_a_usage_error(tmp_path, model_cache, args):
    proc = run_quick([*args, "--quiet"] if args[0] == "run" else list(args), model_cache, cwd=tmp_path, timeout=120)
    one_line_error(proc, 2, "error: ")
    assert not any(tmp_path.iterdir())


def test_a_memory_error_names_every_cause_not_only_model_size():
    from harness.runner.resources import describe

    text = describe(MemoryError(), "building the reference")
    assert "--shape" in text and "--input" in text and "--model-size" in text and "--processes" in text


@pytest.mark.parametrize("action", ["info", "clear"])
def test_cache_commands_on_a_cache_dir_that_is_a_file(tmp_path, model_cache, action):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("mine\n")
    env = harness_env(model_cache) | {"HARNESS_CACHE_DIR": str(not_a_folder)}
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "cache", action],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    one_line_error(proc, 2, str(not_a_folder), "is not a folder")
    assert not_a_folder.read_text() == "mine\n"


@pytest.mark.parametrize(
    "options",
    [
        ("--model-size", "８MiB"),
        ("--processes", "２"),
        ("--repeat", "２"),
        ("--worker-timeout", "３０"),
        ("--gate", "mapped_pss_ratio<=０.５"),
        ("--project-to", "８x1GiB"),
        ("--runs", "1_0"),
    ],
)
def test_non_ascii_digits_are_refused(tmp_path, model_cache, options):
    cache, out = tmp_path / "cache", tmp_path / "run"
    model = () if options[0] == "--model-size" else ("--model-size", "8MiB")
    proc = run_quick(run_args(*options, cache=cache, out=out, model=model), model_cache, timeout=120)
    one_line_error(proc, 2, "error: ", "bad gate" if options[0] == "--gate" else options[0])
    assert not cache.exists() and not out.exists()


def test_a_session_config_key_nothing_reads_is_recorded_as_unverified(tmp_path, model_cache):
    typo, known = "session.disable_prepackng", "session.intra_op.allow_spinning"
    out = tmp_path / "run"
    args = run_args("--session-config", f"{typo}=1", "--session-config", f"{known}=0", modes="mapped", out=out)
    proc = run_quick(args, model_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["run"]["unverified_session_config"] == [typo]
    assert meta["run"]["session"]["config"] == {typo: "1", known: "0"}  # recorded as given
    said = [line for line in proc.stdout.splitlines() if "Session config not verified" in line]
    assert len(said) == 1 and typo in said[0] and known not in said[0], proc.stdout
