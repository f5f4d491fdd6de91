"""A live view of a :class:`~vramlab.vram.monitor.VramMonitor`: ipywidgets redrawing a plotly figure.

The figure is a plain ``go.Figure`` rendered into a ``widgets.Output`` (plotly's ``FigureWidget`` is
unreliable in Colab). A background thread replaces the Output's content every ``refresh_s`` seconds
(``Output.outputs`` may be set from any thread, unlike ``with out:``), so the plot keeps moving while
other cells run. GPU mode: stacked *allocated* and *reserved but unallocated* (this process, through
PyTorch's allocator), the device's used memory and its total (NVML), this process's whole use (NVML),
and the monitor's marks as vertical lines. CPU mode: the process's resident memory (RSS), labelled.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from typing import Any

MiB = 1 << 20


def _check_window(window_s: Any) -> None:
    """None (all samples) or a finite number of seconds > 0; a negative or NaN window would plot nothing."""
    if window_s is None:
        return
    if isinstance(window_s, bool) or not isinstance(window_s, (int, float)) or not math.isfinite(window_s) \
            or window_s <= 0:
        raise ValueError(f"`window_s` must be a positive number of seconds, or None for all samples (got {window_s!r}).")


def _label_levels(times: list[float], labels: list[str], t0: float, t1: float, plot_px: int = 660,
                  levels: int = 5) -> list[int]:
    """A row (0 = top) for each mark's horizontal label so that labels never overlap: each label takes about
    6.5 px per character from its line to the right; it goes to the highest row whose last label ended
    before it starts (the lowest row if none is free)."""
    span = max(t1 - t0, 1e-9)
    ends = [-math.inf] * levels
    out = []
    for t, label in zip(times, labels):
        width = (len(label) * 6.5 + 10) / plot_px * span
        row = next((i for i in range(levels) if ends[i] <= t), min(range(levels), key=lambda i: ends[i]))
        ends[row] = t + width
        out.append(row)
    return out


def monitor_figure(samples: list[dict], events: list[dict] | None = None, mode: str = "GPU",
                   window_s: float | None = 60.0, title: str | None = None, device_source: str | None = "NVML"):
    """A plotly figure of monitor rows (``VramMonitor.samples``), last ``window_s`` seconds (None: all).

    Sizes in MiB, time in seconds since the monitor was made. ``device_source`` names where the device
    columns came from (``VramMonitor.device_source``: ``"NVML"`` or ``"torch.cuda.mem_get_info"``). Each mark
    is a dotted line with a horizontal label; labels of marks close in time go to different rows.
    """
    import plotly.graph_objects as go

    _check_window(window_s)
    rows = list(samples)
    if window_s is not None and rows:
        t_end = rows[-1]["t"]
        rows = [r for r in rows if r["t"] >= t_end - window_s]
    t = [r["t"] for r in rows]
    fig = go.Figure()
    if mode == "GPU":
        alloc = [r["allocated"] / MiB for r in rows]
        unalloc = [(r["reserved"] - r["allocated"]) / MiB for r in rows]
        fig.add_scatter(x=t, y=alloc, name="allocated (PyTorch)", stackgroup="torch", line_color="#08519c")
        fig.add_scatter(x=t, y=unalloc, name="reserved, unallocated", stackgroup="torch", line_color="#9ecae1")
        if any(r.get("process_used") is not None for r in rows):
            fig.add_scatter(x=t, y=[None if r.get("process_used") is None else r["process_used"] / MiB for r in rows],
                            name="this process (NVML)", line=dict(color="#e6550d"))
        if any(r.get("device_used") is not None for r in rows):
            fig.add_scatter(x=t, y=[None if r.get("device_used") is None else r["device_used"] / MiB for r in rows],
                            name=f"device used ({'NVML' if device_source in (None, 'NVML') else 'mem_get_info'})",
                            line=dict(color="#636363"))
            fig.add_scatter(x=t, y=[None if r.get("device_total") is None else r["device_total"] / MiB for r in rows],
                            name="device total", line=dict(color="#000000", dash="dash"))
        default_title = "GPU memory, live"
    else:
        fig.add_scatter(x=t, y=[r["rss"] / MiB for r in rows], name="process RSS", line_color="#31a354",
                        fill="tozeroy")
        default_title = "CPU mode: this process's resident memory (RSS), no GPU"
    t0 = t[0] if t else 0.0
    t1 = t[-1] if t else 1.0
    shown = [ev for ev in events or [] if ev["t"] >= t0]
    rows_of = _label_levels([e["t"] for e in shown], [e["label"] for e in shown], t0, max(t1, t0 + 1e-9))
    for e, row in zip(shown, rows_of):
        fig.add_vline(x=e["t"], line_dash="dot", line_color="#d62728")
        fig.add_annotation(x=e["t"], xref="x", y=1.0 - 0.09 * row, yref="paper", text=e["label"], showarrow=False,
                           xanchor="left", yanchor="top", xshift=2, font=dict(size=10, color="#d62728"),
                           bgcolor="rgba(255,255,255,0.85)")
    fig.update_layout(title=title or default_title, xaxis_title="time since the monitor started (s)",
                      yaxis_title="memory (MiB)", height=340, width=760, margin=dict(l=60, r=20, t=50, b=50),
                      legend=dict(orientation="h", y=-0.25), uirevision="keep")
    return fig


def _display_output(fig) -> dict:
    """A display_data output dict for a plotly figure, in the notebook's default renderer's format.

    Not ``IPython``'s ``format_display_data``: that calls the figure's ``_ipython_display_``, which would
    *show* the figure in whichever cell is running instead of returning it."""
    data = fig._repr_mimebundle_()
    if not data:  # a renderer without a mimebundle (e.g. "browser"): plotly's own mimetype
        import json

        data = {"application/vnd.plotly.v1+json": json.loads(fig.to_json())}
    data.setdefault("text/plain", f"<plotly figure: {fig.layout.title.text}>")
    return {"output_type": "display_data", "data": data, "metadata": {}}


def _toggle_icon(change) -> None:
    """The toggle says what it is doing: "live" with a pause icon while redrawing, "paused" with a play icon."""
    owner = change["owner"]
    if owner.disabled:   # stopped: _show_stopped owns the look
        return
    owner.icon = "pause" if change["new"] else "play"
    owner.description = "live" if change["new"] else "paused"


#: A redraw may take at most this share of the kernel's time: the figure and its JSON cost about 0.13 s of CPU
#: here, so at 2 frames a second on two shared cores (a browser run, issue 29) the redraw thread held the GIL
#: for most of what the kernel got, and the cell it watched ran 4-20 times slower.
REDRAW_SHARE = 0.2


def next_wait(refresh_s: float, redraw_s: float) -> float:
    """Seconds until the next frame: ``refresh_s``, or longer when the last redraw took ``redraw_s`` seconds,
    so redrawing uses at most :data:`REDRAW_SHARE` of the time (a busy machine gets fewer frames, not a
    slower cell)."""
    return max(float(refresh_s), float(redraw_s) * (1 - REDRAW_SHARE) / REDRAW_SHARE)


class VramWidget:
    """``VramWidget(monitor, refresh_s=0.5, window_s=60)``: display it (last expression of a cell or
    ``display(w)``) and it redraws every ``refresh_s`` seconds until :meth:`stop` (or the monitor stops).
    The "live" toggle pauses and resumes the redraws; :meth:`redraw` draws one frame by hand.
    """

    def __init__(self, monitor, refresh_s: float = 0.5, window_s: float | None = 60.0, autostart: bool = True):
        import ipywidgets as widgets

        if not hasattr(monitor, "samples") or not hasattr(monitor, "mode"):
            raise TypeError(f"`monitor` must be a vramlab VramMonitor (got {type(monitor).__name__}).")
        if isinstance(refresh_s, bool) or not isinstance(refresh_s, (int, float)) or not refresh_s >= 0.1:
            raise ValueError(f"`refresh_s` must be a number of seconds >= 0.1 (got {refresh_s!r}).")
        self.monitor = monitor
        self.refresh_s = float(refresh_s)
        _check_window(window_s)
        self.window_s = window_s
        self.frames = 0
        self.out = widgets.Output(layout=widgets.Layout(min_height="350px"))
        self.status = widgets.HTML()
        self.live = widgets.ToggleButton(value=True, description="live", tooltip="pause / resume the redraws",
                                         icon="pause")
        self.live.observe(_toggle_icon, names="value")  # not a bound method: no reference back to self
        self.box = widgets.VBox([widgets.HBox([self.live, self.status]), self.out])
        self.box.add_class("vramlab-vram-widget")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.redraw()
        if autostart:
            self.start()

    def status_text(self) -> str:
        last = self.monitor.latest() if hasattr(self.monitor, "latest") else None
        n = len(self.monitor.samples)
        if last is None:
            return f"{self.monitor.mode}: no samples yet"
        if self.monitor.mode == "GPU":
            text = (f"GPU: allocated {last['allocated'] / MiB:,.0f} MiB, reserved {last['reserved'] / MiB:,.0f} MiB, "
                    f"peak allocated {last['max_allocated'] / MiB:,.0f} MiB, OOMs {last['num_ooms']}, "
                    f"alloc retries {last['num_alloc_retries']}")
            if last.get("device_used") is not None:
                text += f"; device {last['device_used'] / MiB:,.0f} / {last['device_total'] / MiB:,.0f} MiB"
        else:
            text = f"CPU mode (no GPU): process RSS {last['rss'] / MiB:,.0f} MiB"
        state = "sampling" if getattr(self.monitor, "running", False) else "monitor stopped"
        if getattr(self, "live", None) is not None and self.live.disabled:
            state = "stopped: last frame"
        return f"<code>{text} &middot; {n} samples, frame {self.frames} &middot; {state}</code>"

    def figure(self):
        """The current frame: the last ``window_s`` seconds while live; once stopped, the whole run (every
        mark in view), which the title says."""
        stopped = self.live.disabled
        fig = monitor_figure(self.monitor.samples, self.monitor.events, self.monitor.mode,
                             None if stopped else self.window_s,
                             device_source=getattr(self.monitor, "device_source", "NVML"))
        if stopped:
            fig.update_layout(title_text=f"{fig.layout.title.text} (the whole run)")
        return fig

    def _show_stopped(self) -> None:
        """The toggle after the redraws end: off, greyed out and labelled "stopped" (nothing left to pause)."""
        self.live.disabled = True
        self.live.value = False
        self.live.icon = "stop"
        self.live.description = "stopped"
        self.live.tooltip = "the live view has stopped: this is its last frame (start() resumes it)"
        self.out.outputs = (_display_output(self.figure()),)   # the whole run, every mark in view
        self.status.value = self.status_text()

    @property
    def running(self) -> bool:
        """True while the redraw thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def redraw(self) -> None:
        """Draw one frame now (safe from any thread)."""
        self.frames += 1
        self.out.outputs = (_display_output(self.figure()),)
        self.status.value = self.status_text()

    @staticmethod
    def _run(ref: "weakref.ref[VramWidget]", stop: threading.Event, refresh_s: float) -> None:
        # Holds the widget only weakly between frames, so a widget (and its monitor) that nothing else
        # references can be garbage-collected; the monitor's finalizer then stops its sampler.
        wait = refresh_s
        while not stop.wait(wait):
            self = ref()
            if self is None:
                return
            if self.live.value:
                try:
                    started = time.perf_counter()
                    self.redraw()
                    wait = next_wait(refresh_s, time.perf_counter() - started)
                except Exception as exc:  # noqa: BLE001 - keep the kernel alive, say why it stopped
                    self.status.value = f"<code>redraw stopped: {type(exc).__name__}: {exc}</code>"
                    return
            if not getattr(self.monitor, "running", True):
                self.redraw()  # the final state
                self._show_stopped()
                return
            del self

    def start(self) -> "VramWidget":
        if self._thread is None or not self._thread.is_alive():
            if self.live.disabled:   # restarted after a stop
                self.live.disabled = False
                self.live.tooltip = "pause / resume the redraws"
                self.live.value = True
                self.live.icon, self.live.description = "pause", "live"
            self._stop.clear()
            self._thread = threading.Thread(target=VramWidget._run, args=(weakref.ref(self), self._stop, self.refresh_s),
                                            name="vramlab-vram-widget", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> "VramWidget":
        """Stop redrawing (draws the last frame). The monitor keeps its own life cycle."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        self.redraw()
        self._show_stopped()
        return self

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)


def live_view(monitor, refresh_s: float = 0.5, window_s: float | None = 60.0) -> VramWidget:
    """Shorthand: ``live_view(mon)`` as the last line of a cell shows the live widget."""
    return VramWidget(monitor, refresh_s, window_s)


__all__ = ["VramWidget", "monitor_figure", "live_view"]


# ------------------------------------------------------------------------------------------------
# Replaying a dry run (vramlab.vram.dryrun.MemoryTrace) event by event
# ------------------------------------------------------------------------------------------------

class ReplayWidget:
    """``ReplayWidget(trace)``: an ipywidgets ``Play`` + ``IntSlider`` over the events of a
    :class:`~vramlab.vram.dryrun.MemoryTrace`, a plotly figure of allocated memory stacked by category
    (and the allocator model's reserved memory) with a marker at the current event, a bar per category of what
    is alive at that event, and a line of text naming that event's phase, module, op and bytes. Nothing runs on
    a GPU: the title says so.

    What a learner met in a browser (issue 29) shaped it: it opens **at the peak** (a short-lived term such as the
    logits, alive for 3 of 2,718 events, is invisible at the timeline's default zoom, so the bars show every
    category at the current event and the timeline marks each category's largest moment); the stacked bands
    have no outlines (the top band's outline traced every spike below it in its own colour); and ▶ sweeps the
    whole forward in about ``frames`` steps (2,718 events one by one took 78 s to reach the peak).
    """

    def __init__(self, trace, interval_ms: int = 250, frames: int = 60):
        import ipywidgets as widgets

        from vramlab.vram.dryrun import MemoryTrace, trace_figure

        if not isinstance(trace, MemoryTrace) or not trace.events:
            raise ValueError("`trace` must be a MemoryTrace with events (from vramlab.vram.dryrun.dry_run).")
        if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
            raise ValueError(f"`frames` must be a whole number of steps >= 1 for one sweep (got {frames!r}).")
        self.trace = trace
        self._per_cat = trace.categories_over_time()
        self._base = self._timeline(trace_figure(trace))
        n = len(trace.events)
        start = trace.peak_index
        self.slider = widgets.IntSlider(value=start, min=0, max=n - 1, description="event", continuous_update=False,
                                        layout=widgets.Layout(width="520px"))
        self.play = widgets.Play(value=start, min=0, max=n - 1, step=max(1, n // frames), interval=interval_ms)
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.peak_button = widgets.Button(description="go to the peak", layout=widgets.Layout(width="130px"))
        self.peak_button.on_click(lambda _: setattr(self.slider, "value", trace.peak_index))
        self.label = widgets.HTML()
        self.out = widgets.Output(layout=widgets.Layout(min_height="390px"))
        self.bars_out = widgets.Output(layout=widgets.Layout(min_height="300px"))
        self.slider.observe(self._on_step, names="value")
        self.box = widgets.VBox([widgets.HBox([self.play, self.slider, self.peak_button]), self.label, self.out,
                                 self.bars_out])
        self.box.add_class("vramlab-replay-widget")
        self.show(start)

    def _timeline(self, fig):
        """The dry run's figure, with fills only and a marker at each category's largest moment."""
        from vramlab.vram.dryrun import CATEGORIES, COLOURS

        fig.update_traces(line_width=0, selector=dict(stackgroup="alloc"))
        events = self.trace.events
        for c in CATEGORIES:
            ys = self._per_cat[c]
            if not any(ys):
                continue
            i = max(range(len(ys)), key=ys.__getitem__)
            fig.add_scatter(x=[events[i]["i"]], y=[events[i]["live"] / MiB], mode="markers",
                            marker=dict(color=COLOURS[c], size=11, symbol="triangle-down",
                                        line=dict(color="#000000", width=1)),
                            name=f"largest {c}", showlegend=False,
                            hovertemplate=f"largest {c}: {ys[i] / MiB:,.1f} MiB at event {events[i]['i']}<extra></extra>")
        return fig

    def _on_step(self, change) -> None:
        self.show(change["new"])

    def figure(self, i: int | None = None):
        """The timeline with a dotted line at event ``i``."""
        import plotly.graph_objects as go

        i = self.slider.value if i is None else i
        fig = go.Figure(self._base)
        fig.add_vline(x=i, line_dash="dot", line_color="#d62728")
        return fig

    def bars(self, i: int | None = None):
        """What is alive at event ``i``, one bar per category (MiB), on a fixed scale up to the peak."""
        import plotly.graph_objects as go

        from vramlab.vram.dryrun import CATEGORIES, COLOURS

        i = self.slider.value if i is None else i
        cats = [c for c in CATEGORIES if any(self._per_cat[c])]
        mib = [self._per_cat[c][i] / MiB for c in cats]
        fig = go.Figure(go.Bar(x=cats, y=mib, marker_color=[COLOURS[c] for c in cats],
                               text=[f"{v:,.0f}" for v in mib], textposition="outside", cliponaxis=False))
        fig.update_layout(title=f"alive at event {i} (MiB)", xaxis_title="category", yaxis_title="memory (MiB)",
                          yaxis_range=[0, 1.15 * self.trace.peak_bytes / MiB], height=300, width=560,
                          margin=dict(l=60, r=20, t=50, b=50))
        return fig

    def label_text(self, i: int) -> str:
        e = self.trace.events[i]
        at_peak = " &middot; <b>the peak</b>" if i == self.trace.peak_index else ""
        return (f"<code>event {i}: {e['phase']} &middot; {e['module'] or '(top level)'} &middot; {e['op']} &middot; "
                f"{e['category']} {e['bytes'] / MiB:+,.2f} MiB &middot; allocated {e['live'] / MiB:,.1f} MiB "
                f"(peak {self.trace.peak_bytes / MiB:,.1f} MiB){at_peak} &middot; {self.trace.source}</code>")

    def show(self, i: int) -> None:
        """Draw event ``i`` (what the slider and Play call)."""
        self.label.value = self.label_text(i)
        self.out.outputs = (_display_output(self.figure(i)),)
        self.bars_out.outputs = (_display_output(self.bars(i)),)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)


def replay_widget(trace, interval_ms: int = 250, frames: int = 60) -> ReplayWidget:
    """Shorthand: ``replay_widget(dry_run("smollm2-135m", 8, 2048))`` as the last line of a cell."""
    return ReplayWidget(trace, interval_ms, frames)


VramWidget.replay = staticmethod(replay_widget)   # VramWidget.replay(trace) is the same thing
__all__ += ["ReplayWidget", "replay_widget"]
