"""``composer-lab lab``: the notebooks copied to a working folder once, JupyterLab's command."""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from composer_lab.cli import main
from composer_lab.lab import launch
from composer_lab.lab.launch import bundled_notebooks, split_jupyter_options

ROOT = Path(__file__).resolve().parents[2]


def test_lab_copies_the_notebooks_the_first_time_and_prints_the_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(launch, "running_as_root", lambda: False)
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


def test_options_the_command_does_not_know_go_to_jupyterlab_with_their_values(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(launch, "running_as_root", lambda: False)
    folder = tmp_path / "work"
    assert main(["lab", "--port", "8890", str(folder), "--ServerApp.token=s3cret", "--ServerApp.ip", "127.0.0.1",
                 "--no-browser", "--print-command"]) == 0
    command = shlex.split(capsys.readouterr().out.splitlines()[-1])
    assert command[3:] == [f"--ServerApp.root_dir={folder.resolve()}", "--port", "8890", "--ServerApp.token=s3cret",
                           "--ServerApp.ip", "127.0.0.1", "--no-browser"], "8890 is --port's value, not the folder"
    assert folder.is_dir()


def test_split_keeps_the_folder_ours_after_a_flag_and_passes_everything_after_a_double_dash():
    ours = ("--print-command",)
    assert split_jupyter_options(["--allow-root", "nbs", "--print-command"], ours) == (
        ["nbs", "--print-command"], ["--allow-root"])
    assert split_jupyter_options(["nbs", "--", "--print-command", "x"], ours) == (["nbs"], ["--print-command", "x"])
    assert split_jupyter_options(["--ip=0.0.0.0", "nbs"], ours) == (["nbs"], ["--ip=0.0.0.0"])


def test_as_root_allow_root_is_added_with_a_note_and_not_twice(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(launch, "running_as_root", lambda: True)
    folder = tmp_path / "work"
    assert main(["lab", str(folder), "--print-command"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("running as root: added --allow-root (JupyterLab refuses root without it)")
    assert out[2].endswith(f"--ServerApp.root_dir={folder.resolve()} --allow-root")
    assert main(["lab", str(folder), "--allow-root", "--print-command"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].endswith("--allow-root") and out[1].count("--allow-root") == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_composer_lab_lab_serves_the_folder_as_whoever_runs_it(tmp_path):
    """The real command (root on this machine and in containers): JupyterLab starts, on the port
    and token given, serving the notebooks' folder."""
    port, folder = _free_port(), tmp_path / "work"
    server = subprocess.Popen([sys.executable, "-m", "composer_lab", "lab", str(folder), "--no-browser",
                               "--port", str(port), "--ServerApp.port_retries=0", "--ServerApp.token=s3cret",
                               f"--LabApp.workspaces_dir={tmp_path / 'ws'}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token=s3cret", timeout=1) as r:
                    listing = r.read().decode()
                break
            except OSError:
                assert server.poll() is None, f"composer-lab lab exited: {server.communicate()[0]}"
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not answer within 2 minutes")
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0]
    assert "01_quickstart.ipynb" in listing, "the server's root is the notebooks' folder"
    assert "Running as root is not recommended" not in output
