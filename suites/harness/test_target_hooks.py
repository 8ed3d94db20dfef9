"""A target with its own EP touches no generic module: its provider options, its own options,
its versions (and their keys in headline.json, the history and the report) and its device probe
all go through `Target` hooks. Proven with a target defined
here and registered for these tests only (the generic layers never name it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.core.errors import InputError
from harness.targets.base import TargetOption
from harness.targets.cpu import CpuTarget


@dataclass
class ProbeReport:
    """What the demo EP's probe found: the providers this onnxruntime really offers."""

    providers: list[str]

    def lines(self) -> list[str]:
        return [f"demo EP: providers {', '.join(self.providers)}"]

    def to_dict(self) -> dict:
        return {"providers": self.providers}


class DemoTarget(CpuTarget):
    """The cpu target's sessions under another name, with an EP of its own around them."""

    name = "demo"
    summary = "a demo EP (tests only)"
    provider_ep = "the demo EP"
    options = (TargetOption("level", "--demo-level", 1, "demo EP optimisation level", parse=int),)

    def versions(self) -> dict[str, str | None]:
        import onnxruntime as ort

        return {"demo_ep": ort.__version__}

    def version_keys(self) -> dict[str, str]:
        return {"demo_ep": "demo EP"}

    def probe(self, timeout_s: float) -> ProbeReport:
        import onnxruntime as ort

        return ProbeReport(ort.get_available_providers())


TARGET = DemoTarget()


@pytest.fixture
def demo(monkeypatch):
    import harness.targets as registry

    monkeypatch.setitem(registry._MODULES, "demo", __name__)
    monkeypatch.setattr(registry, "NAMES", (*registry.NAMES, "demo"))
    return TARGET


def test_provider_options_follow_the_target_hook(demo):
    from harness.contract.options import RunOptions
    from harness.runner.preflight import check_options

    check_options(RunOptions(target="demo", provider_options={"level": "3"}))  # accepted: it has an EP
    with pytest.raises(InputError, match="--target qnn or --target demo") as err:
        check_options(RunOptions(target="cpu", provider_options={"level": "3"}))
    assert "the demo EP's" in str(err.value)


def test_its_options_reach_the_parser_and_the_run_options(demo):
    from harness.cli_parser import build_parser, target_options
    from harness.contract.options import RunOptions

    ns = build_parser().parse_args(["run", "--target", "demo", "--demo-level", "3"])
    opts = RunOptions.from_arguments(ns, target_options=target_options(ns))
    assert opts.target == "demo" and demo.options_for(opts) == {"level": 3}


def test_its_versions_are_in_every_run_s_metadata(demo):
    import onnxruntime as ort

    from harness.runner.metadata import target_versions

    assert target_versions()["demo_ep"] == ort.__version__


def test_its_version_keys_reach_the_headline_the_history_and_the_report(demo):
    """The runner records every target's version keys in the run's metadata; headline.json's
    versions, the history's columns and the report's environment and version rows take the
    demo target's key from there (core and reports never import the targets)."""
    import onnxruntime as ort

    from harness.core.headline import target_version_labels, versions
    from harness.runner.metadata import environment
    from reports.history import history_columns
    from reports.views import env_keys, version_labels

    env = environment()
    assert env["demo_ep"] == ort.__version__ and env["version_labels"]["demo_ep"] == "demo EP"
    assert versions(env)["demo_ep"] == ort.__version__
    assert "demo_ep" in history_columns(env)
    assert version_labels(env)["demo_ep"] == "demo EP" and "demo_ep" in env_keys(env)
    # the qnn target's keys come the same way: no generic module names them
    assert version_labels(env)["qnn_sdk"] == "QNN SDK" and "onnxruntime_qnn" in versions(env)
    # a run recorded before the labels were: its other env keys, each its own label
    legacy = {k: v for k, v in env.items() if k != "version_labels"}
    assert target_version_labels(legacy)["demo_ep"] == "demo_ep"
    # untrusted metadata: only identifier keys become columns
    hostile = target_version_labels({"version_labels": {"a,b": "x", "=cmd": "y", "ok_key": "z" * 500}})
    assert hostile == {"ok_key": "z" * 60}


def test_no_generic_module_names_a_target_s_version_keys():
    """Every module of harness/ and reports/ outside harness/targets/ is generic."""
    from harness.targets import version_labels

    root = Path(__file__).resolve().parents[2]
    generic = [p for d in ("harness", "reports") for p in (root / d).rglob("*.py") if "targets" not in p.parts]
    keys = list(version_labels())
    assert keys and generic
    named = [(p.relative_to(root).as_posix(), k) for p in generic for k in keys if f'"{k}"' in p.read_text()]
    assert not named, named


def test_doctor_probes_it(demo, capsys, tmp_path):
    import onnxruntime as ort

    from harness.cli import main

    out = tmp_path / "doctor.json"
    assert main(["doctor", "--target", "demo", "--json", str(out)]) == 0
    assert "CPUExecutionProvider" in capsys.readouterr().out
    assert json.loads(out.read_text())["providers"] == ort.get_available_providers()


def test_a_target_without_a_probe_is_not_offered_by_doctor(demo, capsys):
    from harness.cli import main

    assert main(["doctor", "--target", "cpu"]) == 2
    assert "invalid choice: 'cpu'" in capsys.readouterr().err


def test_doctor_says_what_it_does_before_the_probe(demo, capsys, monkeypatch):
    """The qnn probe takes 7-12 s: a terminal that stays blank that long looks hung. What the user
    has seen on stderr when the probe starts is the line saying what it does."""
    from harness.cli import main
    from harness.targets import get_target

    heard: list[str] = []
    original = DemoTarget.probe

    def probe(self, timeout_s: float) -> ProbeReport:
        heard.append(capsys.readouterr().err)
        return original(self, timeout_s)

    monkeypatch.setattr(DemoTarget, "probe_summary", "it lists onnxruntime's providers", raising=False)
    monkeypatch.setattr(DemoTarget, "probe", probe)
    assert main(["doctor", "--target", "demo", "--timeout", "30"]) == 0
    assert heard == [
        "doctor: probing --target demo in a child process: it lists onnxruntime's providers (at most 30 s)\n"
    ]
    assert "about 10 s" in get_target("qnn").probe_summary  # the real probe says it too


def test_a_provider_option_a_target_chooses_is_returned_not_written_into_the_run_s_options(demo):
    """The qnn target once added soc_model=60 to the run's options in ``prepare`` (a caller's
    options changed under it, and a second run with them inherited the choice): a target
    returns what it chose (`Prepared.provider_options`) and the runner runs with it."""
    from harness.contract.options import RunOptions
    from harness.runner.sweep import ran_with
    from harness.targets.base import Prepared
    from harness.targets.qnn.simulator import SIMULATOR_SOC_MODEL, default_soc_model, is_simulator

    opts = RunOptions(target="demo", provider_options={"level": "3"})
    chosen = Prepared(None, 1, [], provider_options={"level": "3", "extra": "1"})  # type: ignore[arg-type]
    assert ran_with(opts, {"demo": chosen}).provider_options == {"level": "3", "extra": "1"}
    assert ran_with(opts, {"demo": Prepared(None, 1, [])}) is opts  # type: ignore[arg-type]
    assert opts.provider_options == {"level": "3"}
    qnn = RunOptions(target="qnn")
    found = default_soc_model(qnn)
    assert qnn.provider_options == {}
    assert (found[0] if found else None) == ({"soc_model": SIMULATOR_SOC_MODEL} if is_simulator() else None)
