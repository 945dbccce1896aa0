"""A published reference run as data, and the scaling model beside it.

A :class:`Preset` holds the model of one reference's cluster, the figures the reference publishes
(:class:`Published`), every value we had to assume (:class:`Assumption`) and derived numbers checked
against the reference's own (:class:`Check`). :func:`compare` puts the model beside every published
figure as plain data; :func:`render_text` prints it as a table. The presets themselves are in
:mod:`tutorial_lib.scaling.presets`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from tutorial_lib.scaling.model import IMAGENET_TRAIN_IMAGES, DataPipeline, ScalingModel, format_duration


@dataclass(frozen=True)
class Assumption:
    """A value the reference does not state, and where ours comes from."""

    name: str
    value: str
    source: str


@dataclass(frozen=True)
class Published:
    """A figure a reference reports for one GPU count (time for the preset's epochs)."""

    gpus: int
    time_to_train_s: float
    source: str
    logged_images_per_s: float | None = None


@dataclass(frozen=True)
class Check:
    """A single derived number compared with the reference's own."""

    name: str
    model: float
    reference: float
    unit: str

    @property
    def relative_error(self) -> float:
        """(model - reference) / reference."""
        return (self.model - self.reference) / self.reference


@dataclass(frozen=True)
class Preset:
    """One reference: its modelled cluster, published figures, assumptions and facts."""

    name: str
    title: str
    reference: str
    model: ScalingModel
    published: tuple[Published, ...]
    assumptions: tuple[Assumption, ...]
    reference_facts: tuple[str, ...]
    notes: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    logged_throughput_source: str = ""
    epochs: int = 90
    dataset_images: int = IMAGENET_TRAIN_IMAGES


def _relative(model: float, reference: float) -> float:
    return (model - reference) / reference


def compare(preset: Preset) -> dict:
    """The model beside every published figure of ``preset``, as plain data (JSON-ready)."""
    published = sorted(preset.published, key=lambda p: p.gpus)
    base = published[0] if len(published) > 1 else None
    base_gpus = base.gpus if base else 1
    gpus = sorted({base_gpus, *(p.gpus for p in published)})
    by_gpus = {pt.gpus: pt for pt in preset.model.project(gpus, preset.epochs,
                                                          preset.dataset_images)}
    model_base = by_gpus[base_gpus].time_to_train_s * base_gpus
    rows = []
    for ref in published:
        point = by_gpus[ref.gpus]
        logged = ref.logged_images_per_s
        rows.append({
            "gpus": ref.gpus, "global_batch": point.global_batch,
            "model_images_per_s": point.images_per_s,
            "model_efficiency": model_base / (ref.gpus * point.time_to_train_s),
            "model_time_to_train_s": point.time_to_train_s,
            "reference_time_to_train_s": ref.time_to_train_s,
            "time_relative_error": _relative(point.time_to_train_s, ref.time_to_train_s),
            "reference_efficiency": (base.time_to_train_s * base.gpus
                                     / (ref.gpus * ref.time_to_train_s)) if base else None,
            "reference_logged_images_per_s": logged,
            "images_per_s_relative_error": _relative(point.images_per_s, logged) if logged
            else None,
            "limited_by": point.limited_by, "allreduce_ms": point.allreduce_s * 1e3,
            "exposed_comm_ms": point.exposed_comm_s * 1e3, "source": ref.source,
        })
    return {
        "preset": preset.name, "title": preset.title, "reference": preset.reference,
        "epochs": preset.epochs, "dataset_images": preset.dataset_images,
        "efficiency_baseline_gpus": base_gpus, "model": asdict(preset.model), "rows": rows,
        "communication_only": _communication_only(preset, published[-1], base_gpus),
        "allreduce_algorithms_ms": _algorithm_table(preset.model, published[-1].gpus),
        "checks": [dict(asdict(c), relative_error=c.relative_error) for c in preset.checks],
        "assumptions": [asdict(a) for a in preset.assumptions],
        "reference_facts": list(preset.reference_facts), "notes": list(preset.notes),
        "logged_throughput_source": preset.logged_throughput_source or None,
    }


def _communication_only(preset: Preset, ref: Published, base_gpus: int) -> dict:
    """What compute + all-reduce alone predict, without I/O ceilings or per-epoch overhead."""
    bare = replace(preset.model, pipeline=DataPipeline())
    base, point = bare.project([base_gpus, ref.gpus], preset.epochs, preset.dataset_images)
    return {"gpus": ref.gpus, "time_to_train_s": point.time_to_train_s,
            "time_relative_error": _relative(point.time_to_train_s, ref.time_to_train_s),
            "efficiency": base.time_to_train_s * base_gpus / (ref.gpus * point.time_to_train_s)}


def _algorithm_table(model: ScalingModel, gpus: int) -> dict[str, float]:
    variants = {"ring": ("ring", "ring"), "halving_doubling": ("halving_doubling", "ring"),
                "hierarchical(ring)": ("hierarchical", "ring"),
                "hierarchical(halving_doubling)": ("hierarchical", "halving_doubling")}
    return {name: replace(model, algorithm=alg, inter_algorithm=inter).allreduce_s(gpus) * 1e3
            for name, (alg, inter) in variants.items()}


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def render_text(report: dict) -> str:
    """The comparison as the table the CLI prints."""
    lines = [f"Preset {report['preset']}: {report['title']}",
             f"Reference {report['reference']}; {report['epochs']} epochs x "
             f"{report['dataset_images']:,} images; efficiency vs "
             f"{report['efficiency_baseline_gpus']} GPU(s)", ""]
    header = (f"{'GPUs':>5} {'batch':>6} {'model img/s':>11} {'model eff':>9} "
              f"{'model time':>11} {'ref time':>11} {'time err':>8} {'ref eff':>7} "
              f"{'ref img/s':>9} {'img/s err':>9} {'comm ms':>7} {'exposed':>7}  limited by")
    lines += [header, "-" * len(header)]
    for r in report["rows"]:
        logged = r["reference_logged_images_per_s"]
        lines.append(
            f"{r['gpus']:>5} {r['global_batch']:>6} {r['model_images_per_s']:>11,.0f} "
            f"{_pct(r['model_efficiency']):>9} {format_duration(r['model_time_to_train_s']):>11} "
            f"{format_duration(r['reference_time_to_train_s']):>11} "
            f"{_pct(r['time_relative_error'], True):>8} {_pct(r['reference_efficiency']):>7} "
            f"{(f'{logged:,.0f}' if logged else '-'):>9} "
            f"{_pct(r['images_per_s_relative_error'], True):>9} {r['allreduce_ms']:>7.1f} "
            f"{r['exposed_comm_ms']:>7.1f}  {r['limited_by']}")
    sources = sorted({r["source"] for r in report["rows"]})
    lines += ["", "Sources: " + "; ".join(sources)]
    if report["logged_throughput_source"]:
        lines.append(report["logged_throughput_source"])
    bare = report["communication_only"]
    lines.append(f"Communication only (no I/O ceiling, no per-epoch overhead) at {bare['gpus']} "
                 f"GPUs: {format_duration(bare['time_to_train_s'])} "
                 f"({_pct(bare['time_relative_error'], True)}), efficiency "
                 f"{_pct(bare['efficiency'])}")
    algos = ", ".join(f"{k} {v:.1f}" for k, v in report["allreduce_algorithms_ms"].items())
    lines.append(f"All-reduce per step at {report['rows'][-1]['gpus']} GPUs (ms): {algos}")
    for c in report["checks"]:
        lines.append(f"Check: {c['name']}: model {c['model']:.2f} {c['unit']} vs reference "
                     f"{c['reference']:.2f} ({_pct(c['relative_error'], True)})")
    lines += ["", "Assumptions (not stated by the reference):"]
    lines += [f"  - {a['name']}: {a['value']} [{a['source']}]" for a in report["assumptions"]]
    lines += ["", "The reference also reports:"] + [f"  - {f}" for f in report["reference_facts"]]
    if report["notes"]:
        lines += ["", "Notes:"] + [f"  - {n}" for n in report["notes"]]
    return "\n".join(lines)
