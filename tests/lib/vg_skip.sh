# The one way a shell test skips (tests/lib/README.md); source it, then
#     [ -r "$trace" ] || vg_skip "the openb trace ($trace)"
# Locally: prints what is missing and exits 77 (CTest's SKIP_RETURN_CODE). When the CI
# environment variable is set (to anything but "", "0" or "false") it exits 1 instead:
# CI has everything, so a skip there means a broken set-up.
vg_skip() {
    case "${CI:-}" in
    "" | 0 | false)
        echo "skipping: missing $*"
        exit 77
        ;;
    *)
        echo "missing under CI (CI=$CI), failing instead of skipping: $*" >&2
        exit 1
        ;;
    esac
}

# For a prerequisite that no Debian main package provides, so that CI cannot have it
# either (the list is in tests/lib/README.md): skips everywhere, CI included, so the test
# reads as "Not Run" in CTest's summary rather than being left out of it.
vg_skip_outside_debian() {
    echo "skipping: missing $* (no Debian main package provides it; also under CI)"
    exit 77
}
