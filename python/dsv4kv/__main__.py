"""``python -m dsv4kv inspect FILE [options]``: the C++ inspector (``dsv4kv inspect``); see dsv4kv.inspect.

Exit status: that of the command, for ``inspect`` the C++ command's table
(``dsv4kv.inspect.InspectStatus``, spec/failure_model.md#failure_model_inspect_status); 2, as for
any usage error, when no command or an unknown one is given.
"""

import errno
import os
import sys

from . import inspect as _inspect

USAGE = """usage: python -m dsv4kv COMMAND ...

commands:
  inspect FILE [--block N] [--token T] [--block-size B] [--tensor NAME] [--format NAME] [--fnuz]
          [--rope K] [--max-file-size BYTES]
          decode a K cache saved as safetensors or .npy (inspect --help for details)
"""


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        try:
            sys.stdout.write(USAGE)
            sys.stdout.flush()
        except OSError as e:  # as `inspect --help` does: quiet for a closed pipe, else one line and 1
            if e.errno != errno.EPIPE:
                sys.stderr.write(f"dsv4kv: cannot write to stdout: {os.strerror(e.errno or errno.EIO)}\n")
                return int(_inspect.InspectStatus.kInspectFailed)
        return int(_inspect.InspectStatus.kInspectOk)
    if not argv:
        sys.stderr.write(USAGE + "dsv4kv: a command is required (inspect)\n")
        return int(_inspect.InspectStatus.kInspectUsageError)
    command, rest = argv[0], argv[1:]
    if command == "inspect":
        return _inspect.main(rest)
    sys.stderr.write(f"dsv4kv: unknown command {command!r} (see python -m dsv4kv --help)\n")
    return int(_inspect.InspectStatus.kInspectUsageError)


def _flush_or_drop_stdout() -> None:
    # A stdout that cannot be written (a reader that went away, a full disk) has been reported by
    # the command; what is still buffered goes to /dev/null, or the flush at exit would fail again
    # and Python would exit with its own status (120) and a second message.
    try:
        sys.stdout.flush()
    except OSError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    status = main()
    _flush_or_drop_stdout()
    sys.exit(status)
