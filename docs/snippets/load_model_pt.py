# Load a finished run's model.pt with torch and torchvision only (tutorial_lib not needed), for every --norm.
import torch
import torchvision

saved = torch.load("runs/r50/model.pt", weights_only=True)
extra = {}
if saved.get("norm") == "group":  # --norm group: each BatchNorm of the ResNet is GroupNorm(min(32, C), C)
    extra["norm_layer"] = lambda channels: torch.nn.GroupNorm(min(32, channels), channels)
model = torchvision.models.get_model(saved["arch"], weights=None, num_classes=saved["num_classes"], **extra)
model.load_state_dict(saved["state_dict"])  # output i is class saved["classes"][i]
model.eval()
