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
NAMED_ELSEWHERE = "named in the legend"  # a title too short for the names says where they are
STEP_PX = 2.0  # data lines are sampled every STEP_PX display pixels for overlap checks
STRETCH_PX = 10.0  # lines sharing a stretch this long along x hide each other there (crossing lines share a few pixels)
MARK_STRETCH_PX = STRETCH_PX - 2 * STEP_PX  # marked from a little less: sampling can shorten a stretch by two steps


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


def _longest_shared_px(under: np.ndarray, over: np.ndarray, tolerance_px: float) -> float:
    """The longest stretch of ``under``'s stroke (display pixels along it, sampled every :data:`STEP_PX`) within
    ``tolerance_px`` of ``over``'s stroke, sampled every quarter pixel (a k-d tree: the distance is off by an eighth
    of a pixel at most). Measured that closely, two lines that only meet at a point (06's measured efficiency
    leaving the ideal line at the smallest run) share a few pixels there, never a stretch."""
    from scipy.spatial import cKDTree

    samples, targets = sample_polyline(under), sample_polyline(over, step=0.25)
    if len(samples) < 2 or not len(targets):
        return 0.0
    distance, _ = cKDTree(targets).query(samples, distance_upper_bound=tolerance_px + 0.125)
    return longest_stretch(samples, np.isfinite(distance))


def longest_stretch(samples: np.ndarray, marked: np.ndarray) -> float:
    """The longest run of consecutive ``marked`` points along the polyline ``samples``, measured along the x axis
    (display pixels): two step schedules that drop at the same epoch share the vertical drop, and lines that meet
    at a point share its neighbourhood, neither of which is a stretch over which one line hides the other."""
    steps = np.abs(np.diff(samples[:, 0]))
    longest = run = 0.0
    for both, step in zip(marked[:-1] & marked[1:], steps, strict=True):
        run = run + step if both else 0.0
        longest = max(longest, run)
    return longest


def coinciding(ax, tolerance_px: float = 1.5, stretch_px: float = MARK_STRETCH_PX) -> list[tuple]:
    """Triples ``(under, over, whole)`` of lines of ``ax`` that lie on top of each other (y within
    ``tolerance_px`` display pixels), over their whole length (the same x values: ``whole``) or over a stretch
    of ``stretch_px`` or more (a schedule with and without warmup after the warmup, runs' top-5 at 100%): the
    later-drawn one hides the other there. Lines of markers only count only where all their points coincide."""
    ax.get_xlim(), ax.get_ylim()  # settles autoscaling, so the transforms are those drawn
    lines = [line for line in ax.lines if len(line.get_xdata()) and not line.get_label().startswith("_")]
    shapes = {id(line): _display_xy(line) for line in lines}
    found = []
    for i, under in enumerate(lines):
        for over in lines[i + 1:]:
            a, b = shapes[id(under)], shapes[id(over)]
            if a.shape == b.shape and np.isfinite(a).all() and np.isfinite(b).all() \
                    and np.abs(a - b).max() <= tolerance_px:
                found.append((under, over, True))
            elif _drawn(under) and _drawn(over) and max(_longest_shared_px(a, b, tolerance_px),
                                                        _longest_shared_px(b, a, tolerance_px)) >= stretch_px:
                found.append((under, over, False))
    return found


def _drawn(line) -> bool:
    return line.get_linestyle() not in ("None", "", " ")


def mark_coinciding(ax, tolerance_px: float = 1.5, named_at_most: int | None = None) -> list[tuple[str, str]]:
    """Draw lines that coincide (wholly or over a stretch) so that all show (each line under another wider and
    paler than the one above it, the top one as it was) and name them in the title (":data:`SAME_VALUES`: B on
    A" for whole lines, "lines that coincide in part: ..." for stretches); return the ``(under, over)`` labels.
    ``named_at_most``: a note longer than this many characters is left out of the title, which then says only
    that lines coincide (a title of many lines squeezes its panel) and that the legend names them: the caller puts
    :func:`coinciding_notes` there (the monitor, in its legend below the panels; 07's what-if)."""
    found = coinciding(ax, tolerance_px)
    _draw_beneath([(under, over) for under, over, _ in found])
    notes = coinciding_notes(ax, found)
    if notes and named_at_most is not None and len(" ".join(notes)) > named_at_most:
        add_note(ax, f"({SAME_VALUES} or coinciding in part: the lower lines drawn wider and paler, {NAMED_ELSEWHERE})")
    else:
        for note in notes:
            add_note(ax, f"({note})")
    return [(under.get_label(), over.get_label()) for under, over, _ in found]


def named_elsewhere(ax) -> bool:
    """Whether :func:`mark_coinciding` left the names of ``ax``'s coinciding lines to the legend."""
    return NAMED_ELSEWHERE in " ".join(ax.get_title().split())


def coinciding_notes(ax, found: list[tuple] | None = None) -> list[str]:
    """The words that name ``ax``'s coinciding lines (:func:`coinciding`'s triples, found anew if not given): one
    note for lines with the same values, one for lines that coincide in part."""
    found = coinciding(ax) if found is None else found
    notes = []
    whole = [_without_common_suffix((u.get_label(), o.get_label())) for u, o, w in found if w]
    if whole:
        notes.append(f"{SAME_VALUES}, drawn on top of each other: "
                     f"{'; '.join(dict.fromkeys(f'{over} on {under}' for under, over in whole))}")
    partial = [_names(members) for members in _connected([(u, o) for u, o, w in found if not w], ax)]
    if partial:
        notes.append(f"lines that coincide in part, the lower drawn wider and paler: {'; '.join(partial)}")
    return notes


def _draw_beneath(pairs: list[tuple]) -> None:
    """Each line that lies under others drawn wider and paler than every line it lies under: its depth is the
    longest chain of lines above it (a line only as deep as the lines it really meets, not as its whole group);
    1.5 pt wider and paler per level, markers a little larger (at most 8 pt)."""
    above: dict[int, list] = {}
    for under, over in pairs:
        above.setdefault(id(under), []).append(over)
    lines = {id(line): line for pair in pairs for line in pair}
    depth: dict[int, int] = {}

    def depth_of(line) -> int:  # the pairs run from earlier-drawn to later-drawn lines: no cycle
        if id(line) not in depth:
            depth[id(line)] = 1 + max((depth_of(over) for over in above.get(id(line), [])), default=-1)
        return depth[id(line)]

    if not lines:
        return
    width = max(line.get_linewidth() for line in lines.values())
    marker = max(line.get_markersize() for line in lines.values())
    for line in lines.values():
        level = depth_of(line)
        if level:
            line.set(linewidth=width + 1.5 * level, alpha=0.6 * 0.8 ** (level - 1))
            if line.get_marker() not in (None, "None", "", " "):
                line.set_markersize(marker + min(2 * level, 8))


def _connected(pairs: list[tuple], ax) -> list[list]:
    """The connected groups of lines the ``(under, over)`` pairs link, each in drawing order."""
    groups: list[list] = []
    for under, over in pairs:
        joined = [g for g in groups if any(line is under or line is over for line in g)]
        merged = [line for g in joined for line in g] + [under, over]
        groups = [g for g in groups if not any(g is j for j in joined)] + [list({id(x): x for x in merged}.values())]
    return [sorted(members, key=ax.lines.index) for members in groups]


NAMED_AT_MOST = 4  # a group of more coinciding lines is named by its first ones and a count (a title is no list)


def _names(members: list) -> str:
    """``a, b and c`` (a suffix all labels share, `` top-5``, said once after the names); a larger group than
    :data:`NAMED_AT_MOST` as ``a, b, c, d and 3 more``."""
    labels = [line.get_label() for line in members]
    suffix = next((s for s in CURVE_SUFFIXES if all(label.endswith(s) for label in labels)), "")
    labels = [label.removesuffix(suffix) for label in labels]
    if len(labels) > NAMED_AT_MOST:
        return f"{', '.join(labels[:NAMED_AT_MOST])}{suffix} and {len(labels) - NAMED_AT_MOST} more"
    return f"{', '.join(labels[:-1])} and {labels[-1]}{suffix}"


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
