"""``python -m dsv4kv inspect FILE [options]``: the C++ inspector (``dsv4kv inspect``); see dsv4kv.inspect."""

import sys

from . import inspect as _inspect

USAGE = """usage: python -m dsv4kv COMMAND ...

commands:
  inspect FILE [--block N] [--token T] [--block-size B] [--tensor NAME] [--fnuz] [--rope K]
          [--max-file-size BYTES]
          decode a K cache saved as safetensors or .npy (inspect --help for details)
"""


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "inspect":
        return _inspect.main(rest)
    print(f"unknown command {command!r}\n{USAGE}", end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        sys.exit(0)
