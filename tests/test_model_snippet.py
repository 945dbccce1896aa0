"""The README's snippet for loading model.pt (kept in docs/snippets/load_model_pt.py) works for every --norm."""

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
