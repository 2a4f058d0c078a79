"""The notebooks in notebooks/ are stored executed and small, and CI validates every one of them.

nbval itself (``scripts/test.sh``: ``pytest tests notebooks --nbval ...``) runs the notebooks
and compares their outputs; these tests pin what makes that validation real: each notebook
is stored with execution counts and outputs (nbval compares a notebook without them as if
lax), carries no widget state or SVG, and sits where the test command looks, and the shipped
sanitize rules parse and replace what they are meant to. A second validation on the scalar CPU
kernels (``ATEN_CPU_CAPABILITY=default``) shows that what is compared verbatim does not depend on
the CPU; training results are checked by assertion in cells left out of the comparison.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from nbval.plugin import get_sanitize_patterns

import composer_lab
from composer_lab.cli import main
from composer_lab.notebook_check import check_notebooks

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SANITIZE = Path(composer_lab.__file__).with_name("nbval_sanitize.cfg")
EXPECTED = ["01_quickstart", "02_algorithm_ordering", "03_event_traces", "04_selective_backprop",
            "05_custom_algorithm", "06_functional_api", "07_ordering_sweep", "08_alibi_language_model",
            "09_tracking", "10_new_methods"]


def _code_cells(path: Path) -> list:
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def _ids(paths: list) -> list[str]:
    return [p.name for p in paths]


def test_the_notebooks_are_there_in_reading_order():
    assert [p.stem for p in NOTEBOOKS[:len(EXPECTED)]] == EXPECTED
    assert all(re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", p.name) for p in NOTEBOOKS), \
        "name notebooks NN_topic.ipynb so they sort in reading order"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_stored_executed_top_to_bottom(path):
    cells = _code_cells(path)
    counts = [c.execution_count for c in cells]
    assert None not in counts, f"{path.name} has unexecuted cells; run python notebooks/execute.py"
    assert counts == list(range(1, len(cells) + 1)), \
        f"{path.name} was not run top to bottom in one kernel (execution counts {counts})"
    assert any(c.outputs for c in cells), f"{path.name} stores no outputs, so nbval would check nothing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_stores_no_widget_state_no_svg_and_no_errors(path):
    nb = nbformat.read(path, as_version=4)
    assert "widgets" not in nb.metadata, f"{path.name} stores widget state; run python notebooks/execute.py"
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        for output in cell.outputs:
            assert output.output_type != "error", f"{path.name}: a cell raised {output.get('ename')}"
            data = output.get("data", {})
            assert "image/svg+xml" not in data, f"{path.name}: store figures as PNG, not SVG (SVG embeds a date)"
            assert "application/vnd.jupyter.widget-state+json" not in data


TIMINGS = re.compile(r"perf_counter|seconds|duration|t_start|cuda")
"""What an output may show and still go unchecked: timings and the hardware."""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_checked_strictly(path):
    """No cell is skipped or in lax mode and no cell ends in ';' (strict nbval fails on it). A cell
    left out of the comparison (NBVAL_IGNORE_OUTPUT) checks its training results with an assert,
    or shows only timings; most outputs are compared verbatim, few go unchecked."""
    cells = _code_cells(path)
    for cell in cells:
        assert "NBVAL_SKIP" not in cell.source, f"{path.name}: a skipped cell is not validated"
        assert not cell.metadata.get("nbval-ignore-output"), f"{path.name}: use the # NBVAL_IGNORE_OUTPUT comment"
        assert not cell.source.rstrip().endswith(";"), f"{path.name}: write `_ = ...` instead of a trailing ';'"
    verbatim = [c for c in cells if c.outputs and "NBVAL_IGNORE_OUTPUT" not in c.source]
    ignored = [c for c in cells if "NBVAL_IGNORE_OUTPUT" in c.source]
    asserted = [c for c in ignored if re.search(r"^assert ", c.source, re.MULTILINE)]
    unchecked = [c for c in ignored if c not in asserted]
    for cell in unchecked:
        assert TIMINGS.search(cell.source), \
            f"{path.name}: a cell left out of the comparison must assert what it shows:\n{cell.source}"
    assert len(verbatim) > len(ignored), f"{path.name}: most outputs must be compared verbatim"
    assert len(verbatim) + len(asserted) > 2 * len(unchecked), f"{path.name}: most outputs must be checked"


@pytest.mark.slow
def test_notebooks_validate_on_the_scalar_cpu_kernels():
    """The second validation CI runs (the first is scripts/test.sh's nbval pass, on this CPU's own
    kernels): with ATEN_CPU_CAPABILITY=default every float rounds differently, so an output
    compared verbatim that is really a training result fails here."""
    assert check_notebooks([ROOT / "notebooks"], kernels=["default"], pytest_args=["-q"]) == 0, \
        "a notebook output depends on the CPU's kernels; check it by assertion in a NBVAL_IGNORE_OUTPUT cell"


def test_the_test_command_validates_the_notebooks_folder():
    """scripts/test.sh runs nbval over notebooks/ in strict mode, so a new notebook there is validated,
    and when it runs the tests in worker processes it keeps each notebook on one of them."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    commands = [shlex.split(line.replace("\\\n", " ")) for line in script.replace("\\\n", " ").splitlines()
                if "pytest" in line and not line.lstrip().startswith("#")]
    pytest_runs = [cmd for cmd in commands if "pytest" in cmd]
    assert pytest_runs, "scripts/test.sh runs no pytest"
    cmd = pytest_runs[-1]
    assert "notebooks" in cmd and "--nbval" in cmd and "--nbval-lax" not in cmd
    assert "--nbval-current-env" in cmd
    assert cmd[cmd.index("--nbval-sanitize-with") + 1] == "composer_lab/nbval_sanitize.cfg"
    if "-n" in cmd:  # in worker processes (pytest-xdist), each notebook's cells run on one worker, in order
        assert cmd[cmd.index("--dist") + 1] in ("loadfile", "loadscope"), \
            "with -n, pass --dist loadfile: nbval runs a notebook's cells one after another in one kernel"


def _rules() -> list[tuple[str, str]]:
    """The rules as nbval reads them, in file order."""
    return get_sanitize_patterns(SANITIZE.read_text())


def _sanitize(text: str) -> str:
    for regex, replace in _rules():
        text = re.sub(regex, replace, text)
    return text


def test_sanitize_rules_ship_with_the_package_and_parse():
    assert SANITIZE.is_file()
    rules = _rules()
    assert len(rules) >= 6
    for regex, _ in rules:
        re.compile(regex)


@pytest.mark.parametrize("volatile, expected", [
    ("algorithms: 43.7 ms of 448.8 ms in the loop", "algorithms: TIME of TIME in the loop"),
    ("trained in 12.3 s", "trained in TIME"),
    ("<composer_lab.trainer.trainer.Trainer object at 0x7f3a2b1c9d10>",
     "<composer_lab.trainer.trainer.Trainer object at 0xADDR>"),
    ("8229.5 samples/s", "RATE"),
    ("run-20250101-120304-017", "RUN_NAME"),
    ("saved to /tmp/tmpa1b2_c3d/run", "saved to /tmp/TMPDIR/run"),
    ("/home/me/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1762: UserWarning: x",
     "FILE:LINE: UserWarning: x"),
])
def test_sanitize_rules_replace_volatile_text(volatile, expected):
    assert _sanitize(volatile) == expected


def test_sanitize_rules_replace_a_real_tqdm_bar_and_keep_counts():
    from tqdm import tqdm

    first = tqdm.format_meter(n=40, total=138, elapsed=3.2, prefix="quickstart")
    second = tqdm.format_meter(n=40, total=138, elapsed=7.9, prefix="quickstart")
    assert first != second
    assert _sanitize(first) == _sanitize(second)
    assert re.fullmatch(r"quickstart:\s+PROGRESS", _sanitize(first))
    assert _sanitize("23 batches an epoch, 138 steps, accuracy 0.955") == \
        "23 batches an epoch, 138 steps, accuracy 0.955"


def test_gpu_section_says_when_it_is_skipped():
    """The stored (CPU) output of notebook 4's GPU section says that it was skipped and why."""
    cells = _code_cells(ROOT / "notebooks" / "04_selective_backprop.ipynb")
    gpu = [c for c in cells if "torch.cuda.is_available()" in c.source and c.outputs]
    text = "".join(o.get("text", "") for c in gpu for o in c.outputs)
    assert "GPU section skipped" in text and "CUDA is not available" in text


def _executed_notebook(folder: Path, *sources: str) -> Path:
    """A notebook of ``sources`` in ``folder``, executed and stored as a user would store it."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    path = folder / "experiment.ipynb"
    nbformat.write(nb, path)
    return path


FACTS = ('print(sorted({"b", "a"}))', 'import time\nprint(f"took {time.perf_counter() % 10:.2f} s")')


def test_check_notebooks_passes_stable_outputs_on_both_kernel_sets(tmp_path):
    """The command a user runs on their own notebook: facts and sanitised timings pass natively and
    on the scalar kernels."""
    assert main(["check-notebooks", str(_executed_notebook(tmp_path, *FACTS))]) == 0


def test_check_notebooks_fails_when_an_output_changed(tmp_path):
    path = _executed_notebook(tmp_path, *FACTS)
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].outputs[0]["text"] = "['a', 'c']\n"
    nbformat.write(nb, path)
    assert main(["check-notebooks", "--kernels", "native", str(path)]) != 0


def test_check_notebooks_refuses_bad_input(tmp_path, capsys):
    assert main(["check-notebooks", str(tmp_path / "missing.ipynb")]) == 2
    assert "no notebook or folder at" in capsys.readouterr().err
    assert main(["check-notebooks", "--kernels", "sse9", str(tmp_path)]) == 2
    assert "kernels must be among native, default" in capsys.readouterr().err


RESULT = "import torch\ntorch.manual_seed(0)\ntotal = torch.tanh(torch.randn(4096) * 3).sum().item()\n"
"""A float that stands for a training result: a sum whose rounding follows the CPU's kernels."""


def _digits(kernels: str) -> str:
    env = dict(os.environ, ATEN_CPU_CAPABILITY=kernels) if kernels != "native" else dict(os.environ)
    code = RESULT + "print(f'{total:.6f}')"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout


def test_check_notebooks_catches_a_result_compared_verbatim_and_accepts_it_asserted(tmp_path):
    """A float result stored verbatim passes on the CPU that stored it and fails on the scalar
    kernels; the same result in a NBVAL_IGNORE_OUTPUT cell with an assertion passes both."""
    if _digits("native") == _digits("default"):
        pytest.skip("this CPU computes the same digits with its own and the scalar kernels; nothing to tell apart")
    verbatim = _executed_notebook(tmp_path, RESULT + "print(f'{total:.6f}')")
    assert check_notebooks([verbatim], kernels=["native"]) == 0
    assert check_notebooks([verbatim], kernels=["default"]) != 0
    asserted = _executed_notebook(tmp_path, "# NBVAL_IGNORE_OUTPUT\n" + RESULT +
                                  "print(f'{total:.6f}')\nassert -60 < total < -50")
    assert check_notebooks([asserted], kernels=["native", "default"]) == 0
