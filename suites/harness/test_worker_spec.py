"""The worker's spec (`harness.contract.spec`): what every worker needs, whatever its target,
is a typed field (``models``, ``settings``: the session knobs, --runs, --warmup,
--concurrency); ``options`` keeps a target's own options only. The spec is format-versioned: a
worker refuses a spec of another version or shape (exit 2, one line) instead of running with
defaults it was never given."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from harness.contract.options import RunOptions
from harness.contract.spec import SPEC_VERSION, WorkerSettings, WorkerSpec
from harness.prep.generated import generated_matmul_chain
from harness.runner.sweep import plan_groups
from harness.targets import get_target
from harness.targets.cpu import prepared_cpu_models

#: What every worker needs: typed fields of the spec, never keys of its options.
RUN_LEVEL = {"models", "session", "runs", "warmup", "concurrency"}


def test_a_spec_round_trips_with_its_typed_settings(tmp_path):
    spec = WorkerSpec(
        target="cpu",
        mode="heap",
        model_folder="/m/a",
        models=["/m/a", "/m/b"],
        settings=WorkerSettings({"config": {"k": "v"}, "intra_op_threads": 2}, runs=5, warmup=2, concurrency=3),
        options={"max_attempts": 2},
    )
    spec.write(tmp_path / "w.spec.json")
    back = WorkerSpec.read(tmp_path / "w.spec.json")
    assert back == spec and isinstance(back.settings, WorkerSettings)
    assert back.model_folders() == ["/m/a", "/m/b"]
    assert back.session_settings().intra_op_threads == 2 and back.session_settings().config == {"k": "v"}
    assert json.loads((tmp_path / "w.spec.json").read_text())["spec_version"] == SPEC_VERSION == 5
    assert WorkerSpec(target="cpu", mode="heap", model_folder="/m/a").model_folders() == ["/m/a"]


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda d: d.update(spec_version=4), "spec_version 4"),
        (lambda d: d.update(settings={"runs": "3"}), "settings.runs"),
        (lambda d: d.update(settings={"concurrency": 0}), "settings.concurrency"),
        (lambda d: d.update(settings={"session": ["x"]}), "settings.session"),
        (lambda d: d.update(settings={"runs": 1, "retries": 3}), "retries"),
        (lambda d: d.update(models="/m/a"), "models"),
        (lambda d: d.update(options=["runs"]), "options"),
    ],
    ids=["older-version", "runs-as-text", "no-thread", "session-not-a-mapping", "unknown-setting", "models", "options"],
)
def test_a_worker_refuses_a_spec_of_another_version_or_shape(tmp_path, capsys, change, problem):
    from harness.runner.worker import EXIT_BAD_SPEC, main

    data = asdict(WorkerSpec(target="cpu", mode="mapped", model_folder="/m/a"))
    change(data)
    path = tmp_path / "w.spec.json"
    path.write_text(json.dumps(data))
    with pytest.raises((ValueError, TypeError), match=problem):
        WorkerSpec.read(path)
    assert main([str(path)]) == EXIT_BAD_SPEC  # before any session, peak sampler or watchdog
    assert "bad spec" in capsys.readouterr().err


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    return generated_matmul_chain(256 * 1024, cache_dir=tmp_path_factory.mktemp("cache"))


def test_the_plan_hands_run_settings_as_fields_and_target_options_as_options(small_model, tmp_path):
    """A cpu run with an ort-native peer: each group's options are its own target's options
    (the peer's: none) plus what its preparation handed its workers, nothing run-level."""
    opts = RunOptions(
        target="cpu",
        peer="ort-native",
        target_options={"max_attempts": 2},
        session_config={"session.intra_op.allow_spinning": "0"},
        intra_op_threads=1,
        runs=7,
        warmup=2,
        concurrency=2,
        processes=[1, 2],
    )
    prepared = {name: prepared_cpu_models([small_model]) for name in ("cpu", "ort-native")}
    groups = plan_groups(opts, prepared, tmp_path, (1, 0.0))
    assert {(g.target, g.mode, g.processes) for g in groups} == {
        (t, m, n) for n in (1, 2) for t, m in (("cpu", "mapped"), ("cpu", "heap"), ("ort-native", "mapped"))
    }
    for group in groups:
        own = {o.name for o in get_target(group.target).options}
        assert set(group.options) <= own and not set(group.options) & RUN_LEVEL, group.options
        assert group.models == [str(small_model.folder.resolve())]
        assert group.settings == WorkerSettings(opts.session_settings().to_dict(), runs=7, warmup=2, concurrency=2)
    cpu = next(g for g in groups if g.target == "cpu")
    assert cpu.options["max_attempts"] == 2
    assert next(g for g in groups if g.target == "ort-native").options == {}


def test_what_a_target_prepares_for_its_workers_stays_its_own(small_model):
    """`Prepared.worker_options` is the target's: nothing run-level is added to it."""
    assert prepared_cpu_models([small_model]).worker_options == {}
