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


def skip_test(what):
    """Inside a unittest test method: skip it locally, fail it under CI."""
    import unittest
    if in_ci():
        raise AssertionError("missing under CI (CI=%s): %s" % (os.environ["CI"], what))
    raise unittest.SkipTest("missing " + what)


def main(argv=None):
    """unittest.main for a CTest test: exits 1 on a failure, 77 (SKIP_RETURN_CODE) when a
    test skipped and none failed, so that a local skip reads as a skip in CTest, 0 when
    every test ran and passed."""
    import unittest
    prog = unittest.main(argv=argv, verbosity=2, exit=False)
    result = prog.result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.skipped:
        print("skipping: %d test(s) skipped" % len(result.skipped))
        sys.exit(77)
    sys.exit(0)
