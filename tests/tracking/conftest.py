"""The trackers' tests run against the real packages (the extras in composer_lab[test])."""

from __future__ import annotations

import pytest


@pytest.fixture
def uri(tmp_path) -> str:
    """A real MLflow tracking store: a sqlite database in the test's folder."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"
