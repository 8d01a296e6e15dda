"""benchmarks/overhead_across_stacks.py: the table of saved layer_overhead reports (medians,
ranges and the quotient of two stacks), and its argument errors. The benchmark itself runs
whole processes for minutes: not run here."""

import pytest

from benchmarks import overhead_across_stacks as oas


def _report(tf_version, rows, ensemble=False):
    head = "| layer | input | step (ms) | ÷ Keras Dense (same input) |" if ensemble else \
        "| layer | step (ms) | ÷ Keras | ÷ tfp.layers twin |"
    lines = [f"TF {tf_version}, 2 CPUs, median of 9 rounds", "", "### SGD: Dense, batch 256", "",
             head, "|---|---:|---:|---:|"]
    for name, ms, ratio in rows:
        lines.append(f"| {name} | constant input | {ms} | {ratio}× |" if ensemble else
                     f"| {name} | {ms} | {ratio}× | 0.50× |")
    return "\n".join(lines) + "\n"


def test_summary_gives_each_stacks_median_range_and_their_quotient(tmp_path):
    for i, ratio in enumerate((2.0, 2.4, 2.2), 1):
        (tmp_path / f"keras2_{i}.md").write_text(
            _report("2.15.1", [("keras Dense", 1.0, 1.0), ("DenseFlipout", 2 * ratio, ratio)]))
    for i, ratio in enumerate((1.1, 1.5, 1.3), 1):
        (tmp_path / f"keras3_{i}.md").write_text(
            _report("2.21.0", [("keras Dense", 1.0, 1.0), ("DenseFlipout", 3.0, ratio)]))
    table = oas.summarize(tmp_path)
    assert "keras2: 3 rounds; TF 2.15.1" in table and "keras3: 3 rounds; TF 2.21.0" in table
    assert "| DenseFlipout | 2.20× (2.00–2.40) | 1.30× (1.10–1.50) | 0.59 | 4.40 / 3.00 |" in table
    assert "| keras Dense | 1.00× (1.00–1.00) | 1.00× (1.00–1.00) | 1.00 | 1.00 / 1.00 |" in table


def test_summary_reads_the_ensemble_tables_rows_per_input(tmp_path):
    (tmp_path / "a_1.md").write_text(_report("2.15.1", [("DenseRank1 (per member)", 1.7, 1.2)],
                                             ensemble=True))
    (tmp_path / "b_1.md").write_text(_report("2.21.0", [("DenseRank1 (per member)", 2.1, 1.3)],
                                             ensemble=True))
    table = oas.summarize(tmp_path)
    assert "| DenseRank1 (per member), constant input | 1.20× (1.20–1.20) | 1.30× (1.30–1.30) " \
           "| 1.08 | 1.70 / 2.10 |" in table


def test_bad_arguments_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit, match=r"No layer_overhead reports .* in "):
        oas.summarize(tmp_path)
    with pytest.raises(SystemExit):
        oas.main(["--python", "keras2", "--out", str(tmp_path)])
    assert "Expected LABEL=INTERPRETER (a label without '_'). Received: --python 'keras2'" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        oas.main(["--python", "a=python", "--out", str(tmp_path)])
    assert "Expected at least two --python LABEL=INTERPRETER and --out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        oas.main(["--python", "a=python", "--python", "b=python", "--out", str(tmp_path),
                  "--rounds", "0"])
    assert "Expected a positive integer. Received: rounds=0" in capsys.readouterr().err
