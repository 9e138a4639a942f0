"""The one way a Python test skips (tests/lib/README.md).

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
    import vg_skip
    try:
        import grpc
    except ImportError as exc:
        vg_skip.skip("python3-grpcio (%s)" % exc)

Locally: prints what is missing and exits 77 (CTest's SKIP_RETURN_CODE). When the CI
environment variable is set (to anything but "", "0" or "false") it exits 1 instead: CI
has everything, so a skip there means a broken set-up. Standard library only, so it works
where the missing package would have been imported.
"""
import os
import sys


def in_ci():
    return os.environ.get("CI", "") not in ("", "0", "false")


def skip(what):
    if in_ci():
        print("missing under CI (CI=%s), failing instead of skipping: %s"
              % (os.environ["CI"], what), file=sys.stderr)
        sys.exit(1)
    print("skipping: missing %s" % what)
    sys.exit(77)
