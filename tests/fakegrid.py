"""An in-process Flower Grid for tests: messages go straight to Python handlers, no runtime.

The grid and the real-ClientApp handler live in `inprocess` (the fast sweep backend uses them
too); the tests keep importing them from here under their old names.
"""

from inprocess import InProcessGrid as FakeGrid
from inprocess import client_app_handler

__all__ = ["FakeGrid", "client_app_handler"]
