"""What every figure of the course does so that a student can read it: a legend that covers no plotted data,
lines that lie on top of each other drawn so that both show and said so in the title, and an empty panel that
says why it is empty instead of showing a numeric axis of nothing.

matplotlib's ``loc="best"`` only minimises the overlap and accepts some; :func:`place_legend` tries the
places inside the axes and takes the first that covers nothing, else puts the legend outside, right of the
axes. ``tests/test_figures_readable.py`` checks every figure the course draws with its own geometry.
"""

from __future__ import annotations

import numpy as np

INSIDE = ("upper right", "upper left", "lower right", "lower left", "center right", "center left",
          "upper center", "lower center")
SAME_VALUES = "same values"  # the words that mark coinciding lines in a title
STEP_PX = 2.0  # data lines are sampled every STEP_PX display pixels for overlap checks


def _renderer(fig):
    return fig.canvas.get_renderer() if hasattr(fig.canvas, "get_renderer") else fig._get_renderer()


def sample_polyline(points: np.ndarray, step: float = STEP_PX) -> np.ndarray:
    """A polyline (display coordinates) with points every ``step`` pixels along each segment."""
    points = points[np.isfinite(points).all(axis=1)]
    if len(points) < 2:
        return points
    starts, steps = points[:-1], np.diff(points, axis=0)
    counts = np.maximum(1, (np.hypot(steps[:, 0], steps[:, 1]) / step).astype(int))
    which = np.repeat(np.arange(len(steps)), counts)  # one row per sample, naming its segment
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + 1
    fractions = (offsets / counts[which])[:, None]
    return np.vstack([points[:1], starts[which] + steps[which] * fractions])


def data_points(ax) -> np.ndarray:
    """Display coordinates covering what ``ax`` plots: its lines (and markers), line collections (error
    bars) and bars, each sampled every few pixels."""
    chunks = [np.empty((0, 2))]
    for line in ax.lines:
        xy = np.asarray(line.get_xydata(), float)
        if len(xy) and line.get_visible():
            chunks.append(sample_polyline(line.get_transform().transform(xy)))
    for collection in ax.collections:
        for path in collection.get_paths():
            chunks.append(sample_polyline(collection.get_transform().transform(path.vertices)))
    chunks += [fill_box(patch.get_window_extent()) for patch in ax.patches]
    return np.vstack(chunks)


def fill_box(box, step: float = 6.0) -> np.ndarray:
    """Display points every ``step`` pixels over a box (a bar, a table), edges included."""
    xs, ys = np.meshgrid(np.linspace(box.x0, box.x1, max(2, int(box.width / step))),
                         np.linspace(box.y0, box.y1, max(2, int(box.height / step))))
    return np.column_stack([xs.ravel(), ys.ravel()])


def covers(box, points: np.ndarray, margin: float = 1.0) -> bool:
    """Whether any of ``points`` lies inside ``box`` (a display Bbox) shrunk by ``margin`` pixels."""
    if not len(points):
        return False
    inside = ((points[:, 0] > box.x0 + margin) & (points[:, 0] < box.x1 - margin)
              & (points[:, 1] > box.y0 + margin) & (points[:, 1] < box.y1 - margin))
    return bool(inside.any())


def place_legend(ax, **kwargs):
    """A legend for ``ax`` where it covers no plotted data: the first free place inside the axes, else outside
    on the right (constrained layout makes room for it). Returns the legend (None without labelled artists)."""
    if not ax.get_legend_handles_labels()[0]:
        return None
    fig = ax.figure
    legend = ax.legend(loc=INSIDE[0], **kwargs)
    renderer = _renderer(fig)
    for other in fig.axes:
        other.get_xlim(), other.get_ylim()  # settles pending autoscaling, so the transforms are the drawn ones
    points = np.vstack([data_points(other) for other in fig.axes])
    for loc in INSIDE:
        legend.set_loc(loc)  # the box moves without a new layout: the legend sits inside the axes
        # no layout has run yet (it costs a whole draw): the layout will shrink the axes around their labels while
        # the legend keeps its size, so the box is checked with a margin for that
        box = legend.get_window_extent(renderer).expanded(1.12, 1.12).padded(6)
        if not covers(box, points):
            return legend
    legend.remove()
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)


def _display_xy(line) -> np.ndarray:
    xy = np.asarray(line.get_xydata(), float)
    return line.get_transform().transform(xy)


def coinciding(ax, tolerance_px: float = 1.5) -> list[tuple]:
    """Pairs ``(under, over)`` of lines of ``ax`` that lie on top of each other over their whole length (the
    same x values, y within ``tolerance_px`` display pixels): the later-drawn one hides the other."""
    ax.get_xlim(), ax.get_ylim()  # settles autoscaling, so the transforms are those drawn
    lines = [line for line in ax.lines if len(line.get_xdata()) and not line.get_label().startswith("_")]
    shapes = {id(line): _display_xy(line) for line in lines}
    pairs = []
    for i, under in enumerate(lines):
        for over in lines[i + 1:]:
            a, b = shapes[id(under)], shapes[id(over)]
            if a.shape == b.shape and np.isfinite(a).all() and np.isfinite(b).all() \
                    and np.abs(a - b).max() <= tolerance_px:
                pairs.append((under, over))
    return pairs


def mark_coinciding(ax, tolerance_px: float = 1.5) -> list[tuple[str, str]]:
    """Draw lines that coincide so that all show (each line under another wider and paler than the one above
    it, the top one as it was) and name them in the title (":data:`SAME_VALUES`: B on A"); return the
    ``(under, over)`` labels."""
    pairs = coinciding(ax, tolerance_px)
    group = {}  # line -> the lines it coincides with (transitively), in drawing order
    for under, over in pairs:
        members = group.get(id(under), [under]) + [line for line in group.get(id(over), [over])
                                                   if line not in group.get(id(under), [under])]
        for line in members:
            group[id(line)] = members
    done = set()
    for members in group.values():
        if id(members[0]) in done:
            continue
        done.update(id(line) for line in members)
        ordered = sorted(members, key=ax.lines.index)
        top = ordered[-1]
        for depth, line in enumerate(reversed(ordered[:-1]), start=1):
            line.set(linewidth=top.get_linewidth() + 2.5 * depth, alpha=max(0.2, 0.6 - 0.15 * depth))
            if line.get_marker() not in (None, "None", "", " "):
                line.set_markersize(top.get_markersize() + 4 * depth)
    named = [(under.get_label(), over.get_label()) for under, over in pairs]
    if named:
        listed = "; ".join(dict.fromkeys(f"{over} on {under}" for under, over in map(_without_common_suffix, named)))
        add_note(ax, f"({SAME_VALUES}, drawn on top of each other: {listed})")
    return named


CURVE_SUFFIXES = (" top-1", " top-5")  # plots.plot_accuracy's two curves of one run


def _without_common_suffix(pair: tuple[str, str]) -> tuple[str, str]:
    """``("a top-1", "b top-1")`` -> ``("a", "b")``: run names, when both labels name the same curve of a run."""
    under, over = pair
    for suffix in CURVE_SUFFIXES:
        if under.endswith(suffix) and over.endswith(suffix):
            return under.removesuffix(suffix), over.removesuffix(suffix)
    return pair


def add_note(ax, note: str) -> None:
    """Put ``note`` under the axes' title, wrapped to the axes' width (a title wider than its panel runs into
    the next one)."""
    import textwrap

    fig = ax.figure
    width_pt = ax.get_position().width * fig.get_figwidth() * 72
    chars = max(20, int(width_pt / 5.8))  # about 5.8 pt per character of the title font
    title = ax.get_title()
    lines = [textwrap.fill(part, chars) for part in ([title] if title else []) + [note]]
    ax.set_title("\n".join(lines), fontsize="medium")


def say_empty(ax, message: str) -> None:
    """An axes with nothing plotted: ``message`` in its middle and no numeric ticks (an axis of nothing would
    read as a measured range)."""
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center", color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def has_data(ax) -> bool:
    """Whether ``ax`` plots anything: a line with points, a bar, a collection, an image or a table."""
    return (any(len(line.get_xdata()) for line in ax.lines) or bool(ax.patches) or bool(ax.collections)
            or bool(ax.images) or bool(ax.tables))


def _overlapping(boxes: list) -> bool:
    """Whether any two of the text boxes share more than a pixel in both directions."""
    return any(min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1
               for i, a in enumerate(boxes) for b in boxes[i + 1:])


def keep_tick_labels_apart(ax) -> None:
    """Turn, then shrink, the x tick labels of ``ax`` until no two overlap (a bar per setting: the 16 settings of
    01 on a GPU ran their names into each other)."""
    for rotation, size in ((0, None), (30, None), (90, None), (90, 7), (90, 6)):
        ax.tick_params(axis="x", labelrotation=rotation, **({"labelsize": size} if size else {}))
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right" if rotation == 30 else "center")
            label.set_rotation_mode("anchor" if rotation == 30 else "default")
        ax.figure.draw_without_rendering()
        shown = [label for label in ax.get_xticklabels() if label.get_visible() and label.get_text()]
        if not _overlapping([label.get_window_extent() for label in shown]):
            return
