"""The report writer both studies share: CSV tables, markdown tables, bar charts, curves.

The ablation's results (results.csv/md, runs.csv, final_metric.png,
loss_curves.png) and the suite's (suite.csv/md, runs.csv, suite.png) are
written through these, so a table or a chart looks the same in both and
whichever launcher ran the runs.
"""
import csv


def write_dict_csv(path: str, columns: list, rows: list) -> None:
    """One row per dict, the given columns (keys outside them are left out)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def write_csv(path: str, header: list, rows: list) -> None:
    """One row per list of cells."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def table_row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def markdown_table(header: list, rows: list) -> list[str]:
    """The lines of a GitHub markdown table."""
    return [table_row(header), "|---" * len(header) + "|"] + [table_row(r) for r in rows]


def mean_std(value: float, std: float, digits: int = 4) -> str:
    return f"{value:.{digits}f} ± {std:.{digits}f}"


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def bar_chart(path: str, names: list, values: list, yerr, colors: list, ylabel: str,
              title: str, figsize: tuple, rotation: int = 30, label_values: bool = False,
              title_size: float | None = None) -> None:
    """One bar per name with error whiskers (yerr: one list, or [low, high])."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=figsize)
    ax.bar(range(len(names)), values, yerr=yerr, capsize=3 if label_values else 4, color=colors)
    if label_values:
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=rotation, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, **({"fontsize": title_size} if title_size else {}))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def curves(path: str, groups: dict, xlabel: str, ylabel: str, title: str) -> None:
    """groups: label -> list of [(x, y), ...] curves; one colour per label."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, lines) in enumerate(groups.items()):
        for j, points in enumerate(p for p in lines if p):
            x, y = zip(*points)
            ax.plot(x, y, color=f"C{i % 10}", alpha=0.8, label=label if j == 0 else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
