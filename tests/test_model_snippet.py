"""The snippet that loads model.pt (docs/snippets/load_model_pt.py, shown in docs/training.md), for every --norm."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tutorial_lib import REPO_ROOT
from tutorial_lib.engine.model_file import save_model
from tutorial_lib.engine.models import build_model

SNIPPET = REPO_ROOT / "docs" / "snippets" / "load_model_pt.py"


@pytest.mark.parametrize("norm", ["batch", "group"])
def test_the_readme_snippet_loads_model_pt_for_every_norm(tmp_path, norm):
    classes = ["n01440764", "n01443537", "n01484850"]
    model = build_model("resnet18", len(classes), norm=norm).eval()
    path = save_model(tmp_path / "model.pt", model, SimpleNamespace(arch="resnet18", norm=norm, image_size=32),
                      len(classes), classes)
    text = SNIPPET.read_text()
    assert '"runs/r50/model.pt"' in text
    scope: dict = {}
    exec(compile(text.replace('"runs/r50/model.pt"', repr(str(path))), str(SNIPPET), "exec"), scope)
    images = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(scope["model"](images), model(images))


def test_the_training_page_shows_the_snippet_that_is_tested():
    """docs/training.md shows the loading code; it must be the file the test above runs, line for line."""
    page = (REPO_ROOT / "docs" / "training.md").read_text()
    code = [line for line in SNIPPET.read_text().splitlines() if line and not line.startswith("# ")]
    shown = page.split("```python\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line for line in shown if line] == code
