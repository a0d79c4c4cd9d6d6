"""The PaddlePaddle plugin of fwbench (entry point "paddle": plugin.PaddlePlugin).

Importing paddle warns that its C++-extension builder found no ccache, which this plugin never
uses; the warning is filtered here, before any module of the package imports paddle."""

import warnings

warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
