"""The Fathom workloads (seed 001) learn on their synthetic data in every task, and write valid records.

Each trains 50 steps of one fixed synthetic batch, on sizes the parameter table offers (``--hidden``,
``--vocab``, ``--seq-len``, ``--image-size``, ``--num-classes``), small enough for a CPU; the loss must
fall: the mean of the last five logged losses below that of the first five.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from dlinfra.cli.bench_cmd import payload_args
from dlinfra.errors import DlinfraError
from dlinfra.payload.cli import parser
from dlinfra.payload.workloads import WORKLOADS
from dlinfra.record import RunRecord

STEPS = 50
#: Small configurations: (flags, batch).
SMALL = {
    "vgg19": (["--image-size", "32", "--num-classes", "10", "--learning-rate", "0.001"], 2),
    "seq2seq": (["--hidden", "32", "--vocab", "50", "--seq-len", "8"], 8),
    "memnet": (["--hidden", "20", "--vocab", "40"], 8),
    "speech": (["--hidden", "32", "--vocab", "10", "--seq-len", "84"], 4),
    "autoenc": (["--hidden", "64"], 16),
    "deepq": (["--num-classes", "4"], 8),
}
TASKS = {"vgg19": "classify", "seq2seq": "seq2seq", "memnet": "memnet", "speech": "ctc", "autoenc": "vae"}


def _run(workload: str, *extra: str) -> tuple[int, RunRecord]:
    from dlinfra.payload.run import execute

    flags, batch = SMALL[workload]
    args = ["--steps", str(STEPS), "--warmup-steps", "0", "--log-every", "1", "--batch-size", str(batch)]
    out = io.StringIO()
    code = execute(parser().parse_args(["run", "--workload", workload, *args, *flags, *extra]), out)
    return code, RunRecord.from_json(out.getvalue())


def _check_learns(record: RunRecord, workload: str) -> tuple[float, float]:
    p, m = record.provenance, record.metrics
    assert (p.status, p.failure_reason) == ("ok", None)
    assert m.measured_steps == STEPS and m.step_times.count == STEPS
    assert m.batch_size == SMALL[workload][1] and m.examples_per_sec and m.examples_per_sec > 0
    assert m.final_accuracy is None and m.accuracy == []  # synthetic data: no accuracy
    assert m.extra["task"] == TASKS.get(workload, "dqn") and m.extra["data_source"] == "synthetic"
    losses = [point.value for point in m.loss]
    assert len(losses) == STEPS and all(v == v for v in losses)  # no NaN
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first, f"{workload}: loss did not fall: first five {first:.4f}, last five {last:.4f}"
    return first, last


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["seq2seq", "speech", "autoenc", "deepq", "vgg19"])
def test_fathom_workload_learns_on_synthetic_data(workload: str) -> None:
    code, record = _run(workload)
    assert code == 0, record.provenance.failure_reason
    _check_learns(record, workload)
    config, flags = record.provenance.cell_config, SMALL[workload][0]
    assert config["workload"] == workload and config["batch_size"] == SMALL[workload][1]
    for key in ("hidden", "vocab", "seq_len"):  # the sizes trained are in the record
        if getattr(WORKLOADS[workload], key):
            assert config[key] == int(flags[flags.index("--" + key.replace("_", "-")) + 1])


@pytest.mark.slow
def test_memnet_through_the_payload_cli_writes_a_valid_record(run_payload, tmp_path: Path) -> None:
    flags, batch = SMALL["memnet"]
    done = run_payload(
        "run",
        "--workload",
        "memnet",
        "--steps",
        str(STEPS),
        "--warmup-steps",
        "0",
        "--log-every",
        "1",
        "--batch-size",
        str(batch),
        *flags,
        out=tmp_path / "r.json",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    _check_learns(done.record, "memnet")


def test_every_model_declares_a_task_and_only_classifiers_take_a_target_accuracy() -> None:
    for name, w in WORKLOADS.items():
        assert (w.kind == "model") == bool(w.task), name
        if w.kind == "model" and not w.classifier:
            assert w.data_kind == "", f"{name}: synthetic only"
            with pytest.raises(DlinfraError, match=f"--target-accuracy does not apply to {name}"):
                payload_args(name, {"target_accuracy": 0.9})
    payload_args("vgg19", {"target_accuracy": 0.9})  # a classifier takes it


def test_a_spec_refuses_target_accuracy_for_a_non_classifier(tmp_path: Path) -> None:
    from dlinfra.errors import SpecError
    from dlinfra.orchestration.spec import load_spec

    path = tmp_path / "c.yml"
    path.write_text("name: c\ninventory: hosts.yml\nworkloads:\n  - {name: memnet, matrix: {target_accuracy: [0.9]}}\n")
    with pytest.raises(SpecError, match="target_accuracy does not apply to memnet"):
        load_spec(path)


def test_target_accuracy_on_a_non_classifier_is_refused_before_training() -> None:
    code, record = _run("deepq", "--target-accuracy", "0.5")
    assert code != 0 and record.provenance.status == "failed"
    assert "--target-accuracy: workload deepq (task dqn) is not a classifier" in record.provenance.failure_reason


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "ps"), [("sync", 0), ("ps-async", 1)])
def test_deepq_and_its_target_network_train_in_distributed_modes(local_cluster, mode: str, ps: int) -> None:
    """The per-step hook (the target network's copy) runs outside the replica function in every mode."""
    flags, batch = SMALL["deepq"]
    args = ["--workload", "deepq", "--steps", "20", "--warmup-steps", "1", "--batch-size", str(batch), *flags]
    cluster = local_cluster(mode, workers=2, ps=ps, chief=ps > 0, args=[*args, "--peer-timeout", "60"])
    codes = cluster.wait(300)
    logs = "\n".join(f"--- {t.name}\n{t.log()[-1500:]}" for t in cluster.tasks)
    assert set(codes.values()) == {0}, f"{codes}\n{logs}"
    lead = cluster.task("chief:0" if ps else "worker:0").record()
    assert lead.provenance.status == "ok" and lead.metrics.extra["task"] == "dqn"
    assert lead.metrics.examples_per_sec > 0 and lead.metrics.loss
