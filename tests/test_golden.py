"""Every golden results folder (`tests/golden.py`) is reproduced exactly: same bytes."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

from tests.golden import (
    CASES,
    GOLDEN_DIR,
    MAIN_JOB,
    SIGNATURE_FILE,
    TABLES,
    config_text,
    cpu_signature,
    report_text,
    run_case,
)

SAME_CPU = json.loads((GOLDEN_DIR / SIGNATURE_FILE).read_text()) == cpu_signature()
# On another CPU the kernels' reordered float32 sums move numbers by ~1e-7 relative; a
# refactor that changes a number moves it by far more.
OTHER_CPU_RTOL = 1e-6


def _same_table(got: str, want: str, name: str) -> None:
    if SAME_CPU:
        assert got == want, f"{name} differs from the frozen copy"
        return
    a, b = pd.read_csv(io.StringIO(got)), pd.read_csv(io.StringIO(want))
    assert list(a.columns) == list(b.columns), name
    for col in a.columns:
        if pd.api.types.is_numeric_dtype(b[col]):
            np.testing.assert_allclose(a[col], b[col], rtol=OTHER_CPU_RTOL, atol=1e-9,
                                       err_msg=f"{name}: {col}")
        else:
            assert a[col].tolist() == b[col].tolist(), f"{name}: {col}"


@pytest.mark.parametrize("case", [MAIN_JOB, *CASES])
def test_golden_folder_is_reproduced_exactly(case, tmp_path):
    out = run_case(case, tmp_path / case)
    want = GOLDEN_DIR / case
    for table in TABLES:
        assert (out / table).exists() == (want / table).exists(), table
        if (want / table).exists():
            _same_table((out / table).read_text(), (want / table).read_text(), f"{case}/{table}")
    got_config, want_config = config_text(out / "config.json"), (want / "config.json").read_text()
    got_report, want_report = report_text(out / "report.md"), (want / "report.md").read_text()
    if SAME_CPU:
        assert got_config == want_config, f"{case}/config.json differs from the frozen copy"
        assert got_report == want_report, f"{case}/report.md differs from the frozen copy"
    # the config block is a run's identity (a rerun resumes only on an equal one): exact
    # on any CPU
    assert json.loads(got_config)["config"] == json.loads(want_config)["config"]
