"""``composer-lab lab``: the notebooks copied to a working folder once, JupyterLab's command."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


from composer_lab.cli import main
from composer_lab.lab.launch import bundled_notebooks

ROOT = Path(__file__).resolve().parents[2]


def test_lab_copies_the_notebooks_the_first_time_and_prints_the_command(tmp_path, capsys):
    folder = tmp_path / "work"
    assert main(["lab", str(folder), "--print-command", "--no-browser"]) == 0
    out = capsys.readouterr().out.splitlines()
    shipped = sorted(p.name for p in bundled_notebooks().glob("*.ipynb"))
    assert sorted(p.name for p in folder.glob("*.ipynb")) == shipped and len(shipped) >= 8
    assert out == [f"{len(shipped)} notebook(s) copied to {folder}",
                   f"{sys.executable} -m jupyterlab --ServerApp.root_dir={folder.resolve()} --no-browser"]
    edited = folder / shipped[0]
    edited.write_text("my edits")
    (folder / shipped[1]).unlink()
    assert main(["lab", str(folder), "--print-command"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"1 notebook(s) copied to {folder}"
    assert edited.read_text() == "my edits", "a later launch keeps the user's notebooks"
    assert (bundled_notebooks() / shipped[0]).read_text() != "my edits", "the shipped ones stay clean"


def test_lab_refuses_the_bundled_folder_itself(capsys):
    assert main(["lab", str(bundled_notebooks()), "--print-command"]) == 2
    assert "bundled notebooks' own folder" in capsys.readouterr().err


def test_jupyterlab_and_the_widgets_extension_are_regular_dependencies():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in dependencies}
    assert {"jupyterlab", "jupyterlab_widgets", "ipykernel"} <= names


def test_run_sh_ends_by_printing_the_command_that_opens_the_lab():
    last = [line for line in (ROOT / "scripts" / "run.sh").read_text().splitlines() if line.strip()][-1]
    assert "composer-lab lab" in last and last.startswith("echo")
