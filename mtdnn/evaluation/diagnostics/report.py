"""One Markdown page of every diagnostic that applies to a run's tasks.

    run (or export) --applicable_sections--> per task: HANS (an NLI head whose labels say entailment, or with
    --label-map), adversarial ARCT (a two-warrant ranking head), cue statistics (classification or two-candidate
    ranking), partial-input baselines (given as finished result JSON, since they train models)
    --write_report--> report.md with relative links to the PNG and JSON files beside it

Every file is written into the report directory; ``report.md`` is written last, atomically.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import CheckpointError, ConfigError, DataError, UserError
from ...fileio import make_dir, read_json, write_atomic, write_json_atomic
from .arct import arct_diagnosis, format_arct_table, write_arct_outputs
from .cues import CueSettings, cue_statistics, format_cue_tables
from .hans import entailment_label_map, format_hans_table, hans_diagnosis, model_predictor, write_hans_outputs
from .hans_file import open_hans
from .outputs import claim_diagnose_dir
from .partial_input import format_partial_table

HANS, ARCT, CUES, PARTIAL = "HANS", "Adversarial ARCT", "Cue statistics", "Partial-input baselines"


@dataclass
class ReportInputs:
    """What the report needs beyond the run: the data root, the HANS file, ``--label-map`` overrides, the
    adversarial ARCT file (relative to the data root), finished partial-input result JSON files, the cue
    settings, the device and the scoring batch size."""

    data_dir: Path
    hans_file: Path
    hans_index: Path | None = None
    label_map: dict[str, str] = field(default_factory=dict)
    adversarial: str = "arct_adversarial/dev-adv-negated.csv"
    partial_input: list[Path] = field(default_factory=list)
    cue_settings: CueSettings | None = None
    device: str = "cpu"
    batch_size: int = 64


def applicable_sections(task) -> list[str]:
    """The diagnostics that apply to one task definition, in report order."""
    sections = []
    if task.kind.classifies and len(task.text) == 2:
        sections += [HANS, CUES, PARTIAL]
    elif task.kind.ranks_candidates and task.num_candidates == 2:
        sections += [ARCT, CUES, PARTIAL]
    elif task.kind.classifies:
        sections += [CUES]
    return sections


def _link(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def existing_hans_analysis(out: Path, model: str, task: str, hans, mapping: dict) -> tuple[dict, dict] | None:
    """An analysis of ``model``'s ``task`` on the same HANS file (and index) with the same label mapping already in
    ``out`` (``diagnose hans``'s ``diagnose-hans.json``, or an earlier report's ``diagnose-hans-<task>.json``), with
    its plot: ``(result, {"json": path, "png": path})``; None when there is none. A damaged file counts as none."""
    for stem in ("diagnose-hans", f"diagnose-hans-{task}"):
        path = out / f"{stem}.json"
        if not path.is_file():
            continue
        try:
            prior = read_json(path, CheckpointError, "HANS analysis")
        except CheckpointError:
            continue
        same = isinstance(prior, dict) and prior.get("model") == model and prior.get("task") == task and \
            prior.get("hans_file") == str(hans.path) and \
            prior.get("index_file") == (str(hans.index) if hans.index else None) and prior.get("label_map") == mapping
        png = out / str(prior.get("plot", "")) if isinstance(prior, dict) else None
        if same and "summary" in prior and png is not None and png.is_file():
            return prior, {"json": path, "png": png}
    return None


def _hans_section(loaded, name: str, inputs: ReportInputs, out: Path) -> list[str]:
    task = loaded.tasks[name]
    try:
        mapping = entailment_label_map(task, {k: v for k, v in inputs.label_map.items() if k in (task.labels or [])})
    except ConfigError as err:
        return [f"Not scored: {err}"]
    hans = open_hans(inputs.hans_file, inputs.hans_index)
    reused = existing_hans_analysis(out, str(loaded.model_dir), name, hans, mapping)
    if reused is not None:  # `diagnose hans` already scored this model and task on this file: link it, no copy
        result, files = reused
    else:
        result = hans_diagnosis(hans, model_predictor(loaded, task, mapping, inputs.device), str(loaded.model_dir),
                                inputs.batch_size, task=name, label_map=mapping)
        files = write_hans_outputs(result, out, f"diagnose-hans-{name}")
    return [f"HANS file `{result['hans_file']}` ({result['examples']} pairs, {result['layout']} layout); heuristic "
            f"and subcase: {result['heuristic_source']}. Label mapping: "
            + ", ".join(f"`{k}` -> {v}" for k, v in mapping.items()) + ".", "",
            format_hans_table(result["summary"]),
            f"![HANS accuracy per heuristic and gold label]({_link(files['png'], out)})", "",
            f"Data: [{files['json'].name}]({_link(files['json'], out)})"]


def _arct_section(loaded, name: str, inputs: ReportInputs, out: Path) -> list[str]:
    try:
        result = arct_diagnosis(loaded, name, inputs.adversarial, inputs.data_dir, inputs.device, inputs.batch_size)
    except DataError as err:
        return [f"Not scored: {err}"]
    files = write_arct_outputs(result, out, f"diagnose-arct-{name}")
    trained = ("the adversarial train set: read the whole adversarial dev against chance" if result["adversarially_trained"]
               else "the original train set: read the original and negated rows and the both-right share")
    return [f"Adversarial dev `{result['adversarial_file']}`, {result['pairs']} pairs; the run was trained on "
            f"`{result['trained_on']}` ({trained}).", "", format_arct_table(result),
            f"![Adversarial ARCT]({_link(files['png'], out)})", "",
            f"Data: [{files['json'].name}]({_link(files['json'], out)})"]


def _cue_section(loaded, name: str, inputs: ReportInputs, out: Path) -> list[str]:
    task = loaded.tasks[name]
    splits = [s for s in ("train", "dev") if s in task.splits]
    try:
        result = cue_statistics(task, splits, inputs.data_dir, inputs.cue_settings or CueSettings())
    except UserError as err:
        return [f"Not computed: {err}"]
    path = out / f"diagnose-cues-{name}.json"
    write_json_atomic(path, result)
    return [format_cue_tables(result), f"Data: [{path.name}]({_link(path, out)})"]


def read_partial_result(source: Path) -> dict:
    """A finished ``diagnose partial-input`` result JSON (``--partial-input``), checked.

    Raises:
        DataError: unreadable, not JSON, or not such a result (naming the file).
    """
    result = read_json(source, DataError, "--partial-input result JSON")
    if not isinstance(result, dict) or not {"task", "input", "seeds", "recipe"} <= set(result):
        raise DataError(f"{source}: not a result of python -m mtdnn.diagnose partial-input (--partial-input)")
    return result


def _partial_section(task, inputs: ReportInputs, out: Path) -> list[str]:
    name = task.name
    lines = []
    for source in inputs.partial_input:
        result = read_partial_result(source)
        if result.get("task") != name:
            continue
        target = out / f"diagnose-partial-input-{name}-{result['input']}.json"
        if Path(source).resolve() != target.resolve():
            shutil.copyfile(source, target)
        lines += [f"Input `{result['input']}`, {len(result['seeds'])} seed(s) {result['seeds']}, recipe "
                  f"{result['recipe']}:", "", format_partial_table(result)]
        png = Path(source).parent / result.get("plot", "")
        if result.get("plot") and png.is_file():
            shutil.copyfile(png, out / target.with_suffix(".png").name)
            lines += [f"![Partial input]({target.with_suffix('.png').name})", ""]
        lines += [f"Data: [{target.name}]({target.name})", ""]
    if not lines:
        kind = "warrants" if task.kind.ranks_candidates else "hypothesis"
        lines = [f"No result given. They train models; make them with `python -m mtdnn.diagnose partial-input "
                 f"--task {name} --input {kind} --seeds 42,43,44` and pass the JSON with `--partial-input`."]
    return lines


def write_report(loaded, inputs: ReportInputs, output_dir: Path) -> tuple[Path, dict[str, list[str]]]:
    """Run every applicable diagnostic on ``loaded``'s tasks and write ``output_dir/report.md``.

    Returns:
        The report's path and ``{task: [section titles]}``.
    """

    output_dir = claim_diagnose_dir(output_dir)
    lines = [f"# Diagnostics of `{loaded.model_dir}`", "",
             f"Model: `{loaded.source}`. Data root: `{inputs.data_dir}`. Written by `python -m mtdnn.diagnose report`.",
             "Sources: HANS (McCoy et al. 2019, arXiv 1902.01007), adversarial ARCT and cue statistics (Niven and Kao "
             "2019, arXiv 1907.07355), hypothesis-only baselines and PMI (Gururangan et al. 2018, arXiv 1803.02324; "
             "Poliak et al. 2018).", ""]
    contents: dict[str, list[str]] = {}
    for name, task in loaded.tasks.items():
        sections = applicable_sections(task)
        contents[name] = sections
        lines += [f"## Task `{name}` ({task.type})", ""]
        if not sections:
            lines += ["No diagnostic applies to this task type.", ""]
        for section in sections:
            lines += [f"### {section}: `{name}`", ""]
            if section == HANS:
                lines += _hans_section(loaded, name, inputs, output_dir)
            elif section == ARCT:
                lines += _arct_section(loaded, name, inputs, output_dir)
            elif section == CUES:
                lines += _cue_section(loaded, name, inputs, output_dir)
            else:
                lines += _partial_section(task, inputs, output_dir)
            lines.append("")
    path = output_dir / "report.md"
    write_atomic(path, "\n".join(lines).rstrip() + "\n")
    return path, contents
