"""A quiet start: the third-party start-up lines that read as errors but are not, filtered.

On a machine without CUDA, importing TensorFlow 2.15 prints ``E ... Unable to register cuDNN
factory`` (and cuFFT, cuBLAS), ``W ... TF-TRT Warning: Could not find TensorRT`` and CPU
notices, TensorFlow 2.21 prints absl's "WARNING: All log messages before absl::InitializeLog()
is called are written to STDERR", and importing TF-Agents prints gym's "Gym has been
unmaintained since 2022 ..." banner. A newcomer reads those as failures. `quiet_import`
imports modules with standard error (file descriptor 2, which TensorFlow's C++ logging writes
to) passed through a filter that drops exactly the lines of `BENIGN` and forwards every other
line as it arrives, so genuine errors and warnings during the import still reach the user.
Nothing is filtered after the import.
"""

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import threading

__all__ = ["AGENT_STACK", "BENIGN", "filtered_stderr", "quiet_import"]

# What the agent imports that prints such lines: TensorFlow, and gym (through TF-Agents).
AGENT_STACK = ("tensorflow", "gym")

# Each pattern matches one line; keep them specific (a line that merely mentions CUDA stays).
BENIGN = tuple(re.compile(p) for p in (
    r"Unable to register cu(DNN|FFT|BLAS) factory: Attempting to register factory for plugin",
    r"TF-TRT Warning: Could not find TensorRT",
    r"Could not find cuda drivers on your machine, GPU will not be used",
    r"This TensorFlow binary is optimized to use available CPU instructions",
    r"^To enable the following instructions: .*rebuild TensorFlow with the appropriate",
    r"oneDNN custom operations are on\. You may see slightly different numerical results",
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$",
    r"^Gym has been unmaintained since 2022 and does not support NumPy 2\.0",
    r"^Please upgrade to Gymnasium, the maintained drop-in replacement of Gym",
    r"^See the migration guide at https://gymnasium\.farama\.org/",
))


class _LineFilter:
    """A text stream that drops whole lines matching a pattern and passes the rest on."""

    def __init__(self, stream, patterns):
        self._stream, self._patterns, self._pending = stream, patterns, ""

    def write(self, text):
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if not any(p.search(line) for p in self._patterns):
                self._stream.write(line + "\n")
        return len(text)

    def flush(self):
        if self._pending:  # A last line without a newline is not held back.
            self.write("\n")
            self._pending = ""
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def filtered_stderr(patterns=BENIGN):
    """Within the block, lines written to standard error that match a pattern are dropped;
    the rest are passed on as they are written. Both levels are filtered: file descriptor 2
    (TensorFlow's C++ logging) and Python's ``sys.stderr`` (gym's ``print``), which are the
    same file in a plain process but not where ``sys.stderr`` was replaced (pytest, IDEs)."""
    python_stderr = sys.stderr
    sys.stderr = _LineFilter(python_stderr, patterns)
    python_stderr.flush()
    read_end, write_end = os.pipe()
    real = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward():
        with os.fdopen(read_end, "rb") as pipe:
            for line in pipe:
                text = line.decode(errors="replace")
                if not any(p.search(text) for p in patterns):
                    os.write(real, line)

    thread = threading.Thread(target=forward, name="stderr-filter", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stderr = python_stderr
        os.dup2(real, 2)  # Closes the pipe's last write end: the forwarder sees EOF.
        thread.join(timeout=10)
        os.close(real)


def quiet_import(*names):
    """Imports the modules (those not installed are left out) with `BENIGN` lines filtered."""
    wanted = [n for n in names if n not in sys.modules and importlib.util.find_spec(n)]
    if wanted:
        with filtered_stderr():
            for name in wanted:
                importlib.import_module(name)
