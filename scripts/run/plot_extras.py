"""plot_extras.py: the panels scripts/run/plot.py adds when a log has them: GPU telemetry
(train_gpt2cu --gpu-log: SM clock and power draw, temperature, throttled steps marked) and
HellaSwag accuracy (--hellaswag), drawn as a third row under throughput and learning rate."""


def has_extras(runs):
    return any("gpu_sm_mhz" in r or "hellaswag_acc" in r for _, rows in runs for r in rows)


def draw_extras(axes, runs, labels, series):
    """axes: the row's two axes; runs: [(path, rows)]; series(rows, key) -> (xs, ys)."""
    ax_gpu, ax_right = axes
    ax_power = ax_gpu.twinx()
    hellaswag = any("hellaswag_acc" in r for _, rows in runs for r in rows)
    for i, ((_, rows), label) in enumerate(zip(runs, labels)):
        colour = f"C{i % 10}"
        xs, ys = series(rows, "gpu_sm_mhz")
        if xs:
            ax_gpu.plot(xs, ys, "-", color=colour, lw=1.2, label=f"{label}: SM MHz")
            px, py = series(rows, "gpu_power_w")
            ax_power.plot(px, py, ":", color=colour, lw=1.2, label=f"{label}: W")
            slow = [(r["step"], r["gpu_sm_mhz"]) for r in rows
                    if r.get("gpu_throttle", 0) & (0x4 | 0x8 | 0x20 | 0x40 | 0x80)]
            if slow:
                ax_gpu.plot(*zip(*slow), "v", color=colour, label=f"{label}: throttled")
        if hellaswag:
            hx, hy = series(rows, "hellaswag_acc")
            if hx:
                ax_right.plot(hx, hy, "o-", color=colour, ms=3, label=label)
        else:
            tx, ty = series(rows, "gpu_temp_c")
            if tx:
                ax_right.plot(tx, ty, color=colour, lw=1.2, label=label)
    ax_gpu.set_title("GPU SM clock (MHz, solid) and power (W, dotted)")
    ax_power.set_ylabel("W")
    ax_right.set_title("HellaSwag accuracy (lowest mean ending loss)" if hellaswag
                       else "GPU temperature (C)")
    if ax_power.get_legend_handles_labels()[0]:
        ax_power.legend(fontsize=8, loc="lower right")
