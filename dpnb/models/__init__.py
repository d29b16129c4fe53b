"""Networks used by the examples and notebooks."""
from .resnet import resnet23_prediction
from .tutorial import tutorial_network

__all__ = ["resnet23_prediction", "tutorial_network"]
