"""Results: what a CEL run leaves behind, and how it is read.

`result` (`CELResult`), `store` (the results folder: atomic writes, file records), `lock`
(one run per folder), `fingerprint` (model and task hashes), `tradeoff` (every metric of the
main task, the `gamed` guard, side effects, the trade-off table's columns), `report`
(`report.md`), `plots`, `export` (`tidy`, `single_heads`), `view` (`view.html`, one page that
opens offline) and `page` (its sortable tables).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.lazy import lazy_package

if TYPE_CHECKING:  # the package's public names; imported on first use (workbench.lazy)
    from workbench.results.compare import (
        COMPARE_FILE,
        compare_lines,
        compare_plot,
        save_compare,
    )
    from workbench.results.explanation import (
        ATTENTION_EXAMPLES_FIGURE,
        EXPLANATION_DIR,
        EXPLANATION_FIGURE,
        explanation_section,
        load_explanation,
    )
    from workbench.results.export import TIDY_COLUMNS, TIDY_FILE, single_heads, tidy, tidy_table
    from workbench.results.fingerprint import (
        DIGITS,
        digest,
        file_digest,
        model_fingerprint,
        task_fingerprint,
    )
    from workbench.results.frontier import (
        FRONTIER_COLUMNS,
        FRONTIER_FILE,
        frontier_table,
        guard_lines,
    )
    from workbench.results.headline import (
        COLLAPSE_SHARE,
        best_line,
        clean_lines,
        collapsed,
        console_lines,
        explained_line,
        result_lines,
        results_line,
        split_order,
    )
    from workbench.results.interactive import (
        CSP,
        attention_rows_html,
        heatmap_figure,
        interactive_available,
        offline,
    )
    from workbench.results.lock import LOCK_FILE, check_unlocked
    from workbench.results.page import fmt_cell, interval_columns
    from workbench.results.plots import (
        PLOT_FUNCTIONS,
        drawn_plots,
        gain_vs_size,
        heads_heatmap,
        heatmap_panels,
        save_figure,
        save_plots,
        side_effects_bars,
        tradeoff_plot,
    )
    from workbench.results.report import (
        REPORT_FILE,
        render_report,
        tradeoff_summary,
        write_report,
    )
    from workbench.results.result import (
        RESULT_VERSION,
        CELResult,
        flagged_heads,
        mark_best,
        select_n,
    )
    from workbench.results.store import (
        CONFIG_FILE,
        RENAMED,
        TABLES,
        UPSTREAM,
        ResultStore,
        read_folder,
        read_run_file,
        read_table,
        stage_inputs,
        upgrade_table,
        write_json,
        write_table,
        write_text,
    )
    from workbench.results.tradeoff import (
        DIFFERENCE_METRICS,
        GUARD_METRICS,
        METRIC_SUFFIXES,
        SIDE_COLUMNS,
        applies,
        drop_inapplicable,
        format_interval,
        gamed,
        gaming_note,
        interval,
        main_metrics_table,
        metric_names,
        side_harms,
        side_summary,
        side_table,
    )
    from workbench.results.view import (
        FIGURES,
        MAX_COMBOS,
        VIEW_FILE,
        render_view,
        write_view,
    )

__getattr__, __dir__, __all__ = lazy_package(globals())
