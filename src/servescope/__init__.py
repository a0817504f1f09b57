"""servescope: where each LLM-serving step's GPU time goes, what the hardware should do, what will pay."""

from __future__ import annotations

from servescope.errors import ServescopeError

__version__ = "0.1.0"
__all__ = ["ServescopeError", "__version__"]
