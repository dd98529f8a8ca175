"""pydeps.py: a missing Python module becomes one sentence and exit code 1, never a traceback.

    from pydeps import optional, require
    np = optional("numpy")   # the module, or None: lets --help run without it
    ...
    args = parser.parse_args()
    np = require("numpy")    # the module, or "error: ... needs numpy ..." on stderr and exit 1

The sentence names the script, the module, the interpreter that lacks it and how to install it
(Debian's package where there is one, else pip); `make deps` installs what every documented
script needs.
"""
import importlib
import os
import sys

# module -> (Debian/Ubuntu package, or None where Debian has none; pip package)
PACKAGES = {
    "numpy": ("python3-numpy", "numpy"),
    "torch": ("python3-torch", "torch"),
    "matplotlib": ("python3-matplotlib", "matplotlib"),
    "regex": ("python3-regex", "regex"),
    "safetensors": (None, "safetensors"),
    "transformers": (None, "transformers"),
    "tiktoken": (None, "tiktoken"),
}


def optional(name):
    """The module, or None when it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def missing_sentence(name, script=None, reason=None):
    script = script or os.path.relpath(os.path.abspath(sys.argv[0]))
    apt, pip = PACKAGES.get(name.split(".")[0], (None, name.split(".")[0]))
    how = (f"`apt-get install {apt}` (Debian/Ubuntu; `make deps` installs it) or "
           f"`pip install {pip}`") if apt else f"`pip install {pip}`"
    why = f" ({reason})" if reason else ""
    return (f"error: {script} needs the Python module {name}{why}, which {sys.executable} cannot "
            f"import; install it with {how}, or run the script with a Python that has it")


def require(name, reason=None):
    """The module; when it cannot be imported, one sentence on stderr and exit code 1."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        # A module that is there but fails inside (a broken install) is named as such.
        if e.name not in (None, name) and not name.startswith(e.name + "."):
            print(f"error: the Python module {name} is installed but cannot be imported "
                  f"({e}); reinstall it", file=sys.stderr)
        else:
            print(missing_sentence(name, reason=reason), file=sys.stderr)
        sys.exit(1)
