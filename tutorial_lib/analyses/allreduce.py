"""All-reduce algorithms as explicit schedules, checked by replaying them and drawn step by step (notebook 07).

A schedule (:func:`ring_schedule`, :func:`halving_doubling_schedule`) is a list of steps, each a list
of simultaneous :class:`Transfer` s. :func:`simulate` replays a schedule on symbolic data, so a test
can check that it really is an all-reduce and that every rank sends ``2(p-1)/p`` of the buffer;
:func:`draw_schedule` draws it from the same replay. Drawing functions take optional matplotlib axes
and return the figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tutorial_lib.scaling import ring_traffic_factor


@dataclass(frozen=True)
class Transfer:
    """Rank ``src`` sends ``chunks`` (indices of the buffer's p equal chunks) to ``dst``, which
    adds them to its own (``reduce``) or stores them (all-gather)."""

    src: int
    dst: int
    chunks: tuple[int, ...]
    reduce: bool


def ring_schedule(ranks: int) -> list[list[Transfer]]:
    """Ring all-reduce: p-1 reduce-scatter steps, then p-1 all-gather steps; in every step each
    rank r sends one chunk to rank r+1 (mod p)."""
    if ranks < 2:
        raise ValueError("a ring needs at least 2 ranks")
    scatter = [[Transfer(r, (r + 1) % ranks, ((r - s) % ranks,), True) for r in range(ranks)]
               for s in range(ranks - 1)]
    gather = [[Transfer(r, (r + 1) % ranks, ((r + 1 - s) % ranks,), False) for r in range(ranks)]
              for s in range(ranks - 1)]
    return scatter + gather


def halving_doubling_schedule(ranks: int) -> list[list[Transfer]]:
    """Recursive halving (reduce-scatter: partners at distance p/2, p/4, ..., 1 swap half of what
    they still own) then recursive doubling (all-gather, distances 1, 2, ..., p/2): 2 log2(p)
    steps. ``ranks`` must be a power of two."""
    if ranks < 2 or ranks & (ranks - 1):
        raise ValueError("recursive halving-doubling needs a power of two ranks >= 2")
    owned = {r: list(range(ranks)) for r in range(ranks)}  # chunks each rank still reduces
    steps = []
    distance = ranks // 2
    while distance >= 1:
        step = []
        for r in range(ranks):
            lower, upper = owned[r][:len(owned[r]) // 2], owned[r][len(owned[r]) // 2:]
            keep, give = (upper, lower) if r & distance else (lower, upper)
            step.append(Transfer(r, r ^ distance, tuple(give), True))
            owned[r] = keep
        steps.append(step)
        distance //= 2
    distance = 1
    while distance < ranks:
        step = [Transfer(r, r ^ distance, tuple(owned[r]), False) for r in range(ranks)]
        owned = {r: sorted(owned[r] + owned[r ^ distance]) for r in range(ranks)}
        steps.append(step)
        distance *= 2
    return steps


def simulate(ranks: int, schedule: Sequence[Sequence[Transfer]]) -> list[list[list[frozenset]]]:
    """Replay ``schedule`` on symbolic data: ``states[k][rank][chunk]`` is the set of ranks whose
    contribution that chunk holds after step k (``states[0]``: before any step). Transfers of a
    step read the previous state. Adding a contribution twice raises ValueError."""
    state = [[frozenset({r}) for _ in range(ranks)] for r in range(ranks)]
    states = [state]
    for step in schedule:
        new = [list(row) for row in state]
        for t in step:
            for c in t.chunks:
                if t.reduce:
                    if state[t.dst][c] & state[t.src][c]:
                        raise ValueError(f"rank {t.dst} would add chunk {c} from rank {t.src} twice")
                    new[t.dst][c] = new[t.dst][c] | state[t.src][c]
                else:
                    new[t.dst][c] = state[t.src][c]
        state = new
        states.append(state)
    return states


def is_allreduce(ranks: int, schedule: Sequence[Sequence[Transfer]]) -> bool:
    """Whether every rank ends with the sum of all ranks' data in every chunk."""
    everyone = frozenset(range(ranks))
    return all(cell == everyone for row in simulate(ranks, schedule)[-1] for cell in row)


def buffer_fraction_sent(ranks: int, schedule: Sequence[Sequence[Transfer]]) -> list[float]:
    """For each rank, the bytes it sends over the whole schedule as a multiple of the buffer."""
    sent = [0] * ranks
    for step in schedule:
        for t in step:
            sent[t.src] += len(t.chunks)
    return [count / ranks for count in sent]


# ------------------------------------------------------------------ diagrams
def _step_titles(schedule: Sequence[Sequence[Transfer]]) -> list[str]:
    titles, counts = [], {True: 0, False: 0}
    for step in schedule:
        phase = step[0].reduce
        counts[phase] += 1
        titles.append(f"{'reduce-scatter' if phase else 'all-gather'} {counts[phase]}")
    return titles


def _arrow_lanes(step: Sequence[Transfer]) -> list[float]:
    """x position of each transfer's arrow: transfers moving the same chunks share their columns
    side by side, so no two arrows of a step lie on top of each other."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, t in enumerate(step):
        groups.setdefault(t.chunks, []).append(i)
    xs = [0.0] * len(step)
    for chunks, members in groups.items():
        lo, width = min(chunks), max(chunks) + 1 - min(chunks)
        for lane, i in enumerate(members):
            xs[i] = lo + (lane + 0.5) * width / len(members)
    return xs


CELL = 0.62  # height of a chunk cell in a rank's row of height 1; arrows cross the gap below it


def draw_schedule(ranks: int, schedule: Sequence[Sequence[Transfer]], title: str, axes=None):
    """One panel for the start and one per step: rows are ranks, columns the buffer's chunks,
    shading = how many ranks' data a chunk holds (the number printed in it; a black edge marks
    a chunk that changed in this step); one arrow per transfer of that step, from the sender to
    the receiver (red: added to the receiver's chunk, blue: copied)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    states = simulate(ranks, schedule)
    panels = len(states)
    if axes is None:
        side = 0.42 * ranks + 0.4
        fig, axes = plt.subplots(1, panels, figsize=(side * panels + 0.6, side + 1.0), layout="constrained")
    axes = list(np.atleast_1d(axes))
    titles = _step_titles(schedule)
    cmap = plt.get_cmap("Greens")
    for k, (ax, state) in enumerate(zip(axes, states, strict=True)):
        for r in range(ranks):
            for c in range(ranks):
                held = len(state[r][c])
                changed = k > 0 and state[r][c] != states[k - 1][r][c]
                ax.add_patch(Rectangle((c, r), 1, CELL, facecolor=cmap(0.15 + 0.75 * held / ranks),
                                       edgecolor="black" if changed else "white",
                                       linewidth=1.4 if changed else 0.8))
                ax.text(c + 0.5, r + CELL / 2, str(held), ha="center", va="center", fontsize=9,
                        color="white" if held > ranks / 2 else "black")
        if k > 0:
            step = schedule[k - 1]
            for t, x in zip(step, _arrow_lanes(step), strict=True):
                down = t.dst > t.src
                start = (x, t.src + CELL) if down else (x, t.src)
                end = (x, t.dst) if down else (x, t.dst + CELL)
                bend = 0.0 if abs(t.dst - t.src) == 1 else (0.3 if down else -0.3)
                ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=8, linewidth=1.1,
                                             shrinkA=0, shrinkB=0, connectionstyle=f"arc3,rad={bend}",
                                             color="tab:red" if t.reduce else "tab:blue", zorder=3))
        ax.set_xlim(-0.05, ranks + 0.05)
        ax.set_ylim(ranks, -0.05)
        ax.set_aspect("equal")
        ax.set_xticks([c + 0.5 for c in range(ranks)], [str(c) for c in range(ranks)], fontsize=9)
        ax.set_yticks([r + CELL / 2 for r in range(ranks)], [f"rank {r}" for r in range(ranks)], fontsize=9)
        ax.tick_params(length=0)
        ax.grid(False)
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.set_title("start" if k == 0 else titles[k - 1], fontsize=10)
        if k == 0:
            ax.set_xlabel("chunk", fontsize=9)
        else:
            ax.set_yticklabels([])
    fig = axes[0].figure
    fig.suptitle(title, fontsize=11)
    return fig


def draw_ring_allreduce(ranks: int = 4, axes=None):
    """The ring all-reduce of ``ranks`` ranks, step by step (see :func:`draw_schedule`)."""
    steps = 2 * (ranks - 1)
    title = (f"Ring all-reduce, p = {ranks}: {steps} steps of p transfers, each 1/p of the buffer; "
             f"every rank sends 2(p-1)/p = {ring_traffic_factor(ranks):.2f} buffers")
    return draw_schedule(ranks, ring_schedule(ranks), title, axes)


def draw_halving_doubling_allreduce(ranks: int = 4, axes=None):
    """The recursive halving-doubling all-reduce of ``ranks`` ranks (a power of two)."""
    steps = 2 * int(math.log2(ranks))
    title = (f"Halving-doubling all-reduce, p = {ranks}: {steps} = 2 log2(p) steps, pairs swap "
             f"1/2, 1/4, ... of the buffer; every rank sends {ring_traffic_factor(ranks):.2f} buffers")
    return draw_schedule(ranks, halving_doubling_schedule(ranks), title, axes)


def arrow_count(ax) -> int:
    """Arrows drawn on one panel (one per transfer)."""
    from matplotlib.patches import FancyArrowPatch

    return sum(isinstance(patch, FancyArrowPatch) for patch in ax.patches)
