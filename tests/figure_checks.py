"""What a student must be able to read in a figure, checked with matplotlib's own geometry after a real draw.

:func:`problems` lists, for one figure, every place where

* a text (a value label, a note) lies over a plotted line, marker or error bar;
* a legend covers plotted data (lines, markers, error bars, bars, a table) of any panel;
* a line runs outside its axes' limits, or lies along the axes' edge (within 2 px or 2% of the axis) where the
  spine hides it or it reads as the axis;
* two lines coincide over their whole length, or over a stretch of it (:data:`STRETCH_PX` or more along x; a
  shared vertical drop or the pixels around a point where two lines meet are no stretch: 04's schedules
  with and without warmup after the warmup, its runs' top-5 at 100%), and either the lower one is not drawn wider
  and paler than the upper one, or nothing in the panel (title, legend, text) says "same values";
* a panel shows an axis but plots nothing, without a message in it, or with numeric ticks of nothing;
* an epoch axis (x label "epoch") shows a fractional epoch or reaches past the epochs the figure is of;
* a panel's title takes more than 60% of its height, or a text is smaller than :data:`SMALLEST_PX` on screen.

Written apart from :mod:`tutorial_lib.figures.readable` on purpose (only its polyline geometry is shared): a
check that shared the drawing code's idea of "data" could not catch that idea being wrong.
"""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

# geometry only: what is data, and what lies on what, is decided here
from tutorial_lib.figures.readable import fill_box, longest_stretch, sample_polyline

SAME = ("same values", "coincid", "identical")
NEAR_PX = 1.5  # two strokes closer than this (display pixels) lie on top of each other
TITLE_SHARE = 0.6  # a panel title taller than this share of its panel squeezes it (04's monitor: 67%, 124%)
NOTEBOOK_PX = 1000  # display pixels of a notebook's output column (JupyterLab on a 1280-pixel-wide screen)
SMALLEST_PX = 7.5  # the smallest text height read on screen (matplotlib's "small" at 15 inches: 7.7)
STRETCH_PX = 10.0  # a shared stretch this long hides a line there (two lines that cross share a few pixels only)


def _line_xy(line: Line2D) -> np.ndarray:
    xy = np.asarray(line.get_xydata(), dtype=float)
    return line.get_transform().transform(xy)


def _strokes(ax) -> np.ndarray:
    """Display points along every visible line (or at its markers) and every line collection (error bars)."""
    out = [np.empty((0, 2))]
    for line in ax.lines:
        if not line.get_visible() or not len(line.get_xdata()):
            continue
        xy = _line_xy(line)
        out.append(sample_polyline(xy) if line.get_linestyle() not in ("None", "", " ") else xy)
    for collection in ax.collections:
        for path in collection.get_paths():
            out.append(sample_polyline(collection.get_transform().transform(path.vertices)))
    return np.vstack(out)


def _areas(ax) -> np.ndarray:
    """Display points filling every bar (patch) and table of ``ax``."""
    out = [np.empty((0, 2))]
    boxes = [patch.get_window_extent() for patch in ax.patches]
    boxes += [table.get_window_extent() for table in ax.tables]
    return np.vstack(out + [fill_box(box, 4.0) for box in boxes])


def _inside(box, points: np.ndarray, margin: float = 1.0) -> int:
    if not len(points):
        return 0
    return int(((points[:, 0] > box.x0 + margin) & (points[:, 0] < box.x1 - margin)
                & (points[:, 1] > box.y0 + margin) & (points[:, 1] < box.y1 - margin)).sum())


def _has_data(ax) -> bool:
    return (any(len(line.get_xdata()) for line in ax.lines) or bool(ax.patches) or bool(ax.collections)
            or bool(ax.images) or bool(ax.tables))


def _words(ax) -> str:
    texts = [ax.get_title(), *(t.get_text() for t in ax.texts)]
    if ax.get_legend() is not None:
        texts += [t.get_text() for t in ax.get_legend().get_texts()]
    return " ".join(texts).lower()


def problems(fig, name: str, epochs: int | None = None) -> list[str]:
    """Every readability problem of ``fig`` (after a draw), each naming ``name``, the panel and what is wrong.
    ``epochs``: the epochs the figure's runs ran or planned (an epoch axis may reach epochs + 1 at most)."""
    if not hasattr(fig.canvas, "get_renderer"):  # a figure closed by pyplot keeps a canvas that cannot draw
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.draw_without_rendering()  # the layout and every text's size, without rasterising the figure
    renderer = fig.canvas.get_renderer()
    found = []
    panels = [ax for ax in fig.axes if ax.get_visible()]
    strokes = {id(ax): _strokes(ax) for ax in panels}
    areas = {id(ax): _areas(ax) for ax in panels}
    everything = np.vstack([strokes[id(ax)] for ax in panels] + [areas[id(ax)] for ax in panels])
    for index, ax in enumerate(panels):
        where = f"{name}, panel {index} ({ax.get_title().splitlines()[0] if ax.get_title() else 'untitled'})"
        for text in ax.texts:
            if text.get_visible() and text.get_text().strip():
                hits = sum(_inside(text.get_window_extent(renderer), strokes[id(other)]) for other in panels)
                if hits:
                    found.append(f"{where}: the text {text.get_text()!r} lies over plotted data ({hits} points)")
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            hits = _inside(legend.get_window_extent(renderer), everything)
            if hits:
                found.append(f"{where}: its legend covers plotted data ({hits} points)")
        found += _lines_in_limits(ax, where)
        found += _tick_labels_apart(ax, where, renderer)
        found += _coinciding(ax, where)
        if ax.axison and not _has_data(ax):
            if not any(t.get_text().strip() for t in ax.texts):
                found.append(f"{where}: an empty panel without a message")
            shown = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
            if shown:
                found.append(f"{where}: an empty panel shows a numeric axis {shown[:3]}...")
        if ax.get_xlabel().lower() in ("epoch", "training step") and _has_data(ax):
            found += _count_axis(ax, where, epochs if ax.get_xlabel().lower() == "epoch" else None)
        for line in ax.lines:
            if line.get_visible() and len(line.get_xdata()) == 1 and line.get_marker() in (None, "None", "", " "):
                found.append(f"{where}: {line.get_label()!r} is one point without a marker: it is not drawn")
    for legend in fig.legends:
        hits = _inside(legend.get_window_extent(renderer), everything)
        if hits:
            found.append(f"{name}: the figure's legend covers plotted data ({hits} points)")
    return found + _titles(fig, name, renderer) + _text_sizes(fig, name)


def _titles(fig, name: str, renderer) -> list[str]:
    """Panel titles (and the figure's) inside the figure and clear of each other."""
    found = []
    titles = [ax.title for ax in fig.axes if ax.get_visible() and ax.get_title()]
    titles += [fig._suptitle] if getattr(fig, "_suptitle", None) is not None else []
    page = fig.bbox
    boxes = [(title.get_text().splitlines()[0], title.get_window_extent(renderer)) for title in titles]
    for text, box in boxes:
        if box.x0 < page.x0 - 2 or box.x1 > page.x1 + 2 or box.y1 > page.y1 + 2:
            found.append(f"{name}: the title {text!r} runs off the figure")
    for ax in (ax for ax in fig.axes if ax.get_visible() and ax.axison and ax.get_title()):
        title, panel = ax.title.get_window_extent(renderer).height, ax.get_window_extent(renderer).height
        if title > TITLE_SHARE * panel:
            found.append(f"{name}: the title {ax.get_title().splitlines()[0]!r} ({ax.get_title().count(chr(10)) + 1} "
                         f"lines) is {title / panel:.0%} of its panel's height, which it squeezes")
    for i, (text, box) in enumerate(boxes):
        for other, other_box in boxes[i + 1:]:
            if box.overlaps(other_box) and min(box.x1, other_box.x1) - max(box.x0, other_box.x0) > 2 \
                    and min(box.y1, other_box.y1) - max(box.y0, other_box.y0) > 2:
                found.append(f"{name}: the titles {text!r} and {other!r} overlap")
    return found


def _text_sizes(fig, name: str) -> list[str]:
    """Every text of the figure at least :data:`SMALLEST_PX` high on screen, where a figure wider than a notebook's
    column (:data:`NOTEBOOK_PX` at 100 dpi) is shown scaled down to it (07's 15-inch figure's 6.5 pt legend read at
    about 5 px)."""
    from matplotlib.text import Text

    scale = min(1.0, NOTEBOOK_PX / (fig.get_figwidth() * 100))
    small = {}
    for text in fig.findobj(Text):
        shown = text.get_fontsize() * 100 / 72 * scale
        if text.get_visible() and text.get_text().strip() and shown < SMALLEST_PX:
            small.setdefault(round(shown, 1), text.get_text().splitlines()[0][:30])
    return [f"{name}: text {words!r} is {px:g} px high in a notebook (under {SMALLEST_PX} px: too small to read)"
            for px, words in sorted(small.items())]


def _tick_labels_apart(ax, where: str, renderer) -> list[str]:
    """No two tick labels of one axis overlap (each one readable)."""
    found = []
    for axis, labels in (("x", ax.get_xticklabels()), ("y", ax.get_yticklabels())):
        shown = [(label.get_text().replace("\n", " "), label.get_window_extent(renderer)) for label in labels
                 if label.get_visible() and label.get_text()]
        for i, (text, box) in enumerate(shown):
            for other, other_box in shown[i + 1:]:
                if min(box.x1, other_box.x1) - max(box.x0, other_box.x0) > 1 \
                        and min(box.y1, other_box.y1) - max(box.y0, other_box.y0) > 1:
                    found.append(f"{where}: the {axis} tick labels {text!r} and {other!r} overlap")
    return found


def _lines_in_limits(ax, where: str) -> list[str]:
    found = []
    to_axes = ax.transAxes.inverted()
    height, width = ax.get_window_extent().height, ax.get_window_extent().width
    for line in ax.lines:
        xy = _line_xy(line)
        xy = xy[np.isfinite(xy).all(axis=1)]
        if not len(xy) or not line.get_visible():
            continue
        rel = to_axes.transform(xy)
        if ((rel < -1e-6) | (rel > 1 + 1e-6)).any():
            found.append(f"{where}: the line {line.get_label()!r} runs outside the axis limits")
            continue
        for axis, size in ((1, height), (0, width)):  # a line along the top/bottom (left/right) edge
            for edge in (0.0, 1.0):
                # within 2 px, or 2% of the axis (02's model line at 1.4 img/s on a 0-150 axis): it reads as the edge
                if len(rel) >= 2 and (np.abs(rel[:, axis] - edge) * size <= max(2.0, 0.02 * size)).all():
                    found.append(f"{where}: the line {line.get_label()!r} lies on the axes' edge, under the spine")
    return found


def _near_polyline(points: np.ndarray, polyline: np.ndarray) -> np.ndarray:
    """Which points lie within :data:`NEAR_PX` of ``polyline`` (display pixels): a k-d tree over the polyline
    sampled every quarter pixel (so the answer is off by an eighth of a pixel at most)."""
    from scipy.spatial import cKDTree

    dense = sample_polyline(polyline, step=0.25)
    if not len(dense):
        return np.zeros(len(points), bool)
    distance, _ = cKDTree(dense).query(points, distance_upper_bound=NEAR_PX + 0.125)
    return np.isfinite(distance)


def _hidden_px(under: np.ndarray, over: np.ndarray) -> float:
    """The longest stretch of ``under``'s stroke (display pixels along it) that lies on ``over``'s."""
    samples = sample_polyline(under)
    if len(samples) < 2:
        return 0.0
    return longest_stretch(samples, _near_polyline(samples, over))


def _shares(a: np.ndarray, b: np.ndarray, drawn: bool) -> str | None:
    """``"the same points"``, ``"over N px"`` (a stretch of a drawn line) or None: how ``a`` lies on ``b``."""
    if a.shape == b.shape and np.isfinite(a).all() and np.isfinite(b).all() and np.abs(a - b).max() <= NEAR_PX:
        return "the same points"
    if not drawn:  # markers only: only the same points hide each other
        return None
    hidden = max(_hidden_px(a, b), _hidden_px(b, a))
    return f"over {hidden:.0f} px of its length" if hidden >= STRETCH_PX else None


def _coinciding(ax, where: str) -> list[str]:
    found = []
    lines = [line for line in ax.lines if line.get_visible() and len(line.get_xdata())
             and not line.get_label().startswith("_")]
    shapes = [_line_xy(line) for line in lines]
    drawn = [line.get_linestyle() not in ("None", "", " ") for line in lines]
    for i, (a, under) in enumerate(zip(shapes, lines, strict=True)):
        for b, over, over_drawn in zip(shapes[i + 1:], lines[i + 1:], drawn[i + 1:], strict=True):
            shared = _shares(a, b, drawn[i] and over_drawn)
            if shared is None:
                continue
            both_seen = (under.get_linewidth() >= over.get_linewidth() + 1.5
                         and (under.get_alpha() or 1.0) < (over.get_alpha() or 1.0))
            if not both_seen:
                found.append(f"{where}: {over.get_label()!r} hides {under.get_label()!r} ({shared})")
            if not any(word in _words(ax) for word in SAME):
                found.append(f"{where}: {over.get_label()!r} and {under.get_label()!r} coincide and nothing says so")
    return found


def _count_axis(ax, where: str, epochs: int | None) -> list[str]:
    """An axis of epochs or steps: whole numbers only; an epoch axis ends at most one past ``epochs``."""
    found = []
    low, high = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if low - 1e-9 <= t <= high + 1e-9]
    fractional = [t for t in ticks if abs(t - round(t)) > 1e-9]
    if fractional:
        found.append(f"{where}: the {ax.get_xlabel()} axis shows fractions {fractional[:3]}")
    if epochs is not None and high > epochs + 1:
        found.append(f"{where}: the epoch axis reaches {high:g} for {epochs} epoch(s)")
    if low < -1e-9:
        found.append(f"{where}: the epoch axis starts below 0 ({low:g})")
    return found
