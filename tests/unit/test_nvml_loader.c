/* Unit tests for src/nvml (the NVML loader): what each program is told when NVML is
 * missing, is not NVML, or lacks an entry point it needs; that a loaded library answers
 * through the table; and that a name outside the table is a caller's mistake, named. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nvml/loader.h"

static char state_dir[] = "/tmp/vgpu-nvml-loader-XXXXXX";

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(state_dir))
        return -1;
    setenv("FAKEGPU_STATE_DIR", state_dir, 1);
    setenv("FAKEGPU_DEVICES", "Test GPU:16GiB:16,Test GPU:16GiB:16", 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char path[sizeof state_dir + 32];
    snprintf(path, sizeof path, "%s/fakegpu.state", state_dir); /* src/fakegpu/state.c */
    (void)unlink(path);
    (void)rmdir(state_dir);
    return 0;
}

static bool all_zero(const struct nvml_lib *lib)
{
    static const struct nvml_lib zero;
    return memcmp(lib, &zero, sizeof zero) == 0;
}

static void test_missing_library(void **state)
{
    (void)state;
    struct nvml_lib lib;
    struct vg_err err = {0};
    assert_int_equal(nvml_lib_open(&lib, "/nonexistent/libnvidia-ml.so.1", NULL, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "NVML: cannot load /nonexistent/libnvidia-ml.so.1"));
    assert_non_null(strstr(err.msg, "is the NVIDIA driver installed?"));
    assert_true(all_zero(&lib));
    assert_string_equal(nvml_lib_error(&lib, NVML_ERROR_UNKNOWN), "unknown NVML error");
}

static void test_not_nvml(void **state)
{
    (void)state;
    struct nvml_lib lib;
    struct vg_err err = {0};
    /* libc loads, but has none of NVML's entry points */
    assert_int_equal(nvml_lib_open(&lib, "libc.so.6", NULL, &err), -ENOSYS);
    assert_string_equal(err.msg, "NVML: libc.so.6 has no nvmlInit_v2");
    assert_true(all_zero(&lib));
}

static void test_fakegpu(void **state)
{
    (void)state;
    static const char *const required[] = {"nvmlDeviceGetCount_v2", "nvmlDeviceGetUUID",
                                           "nvmlDeviceGetMemoryInfo", NULL};
    struct nvml_lib lib;
    struct vg_err err = {0};
    assert_int_equal(nvml_lib_open(&lib, FAKEGPU_NVML, required, &err), 0);
    assert_true(lib.initialized);
    assert_non_null(lib.handle);
    unsigned count = 0;
    assert_int_equal(lib.get_count(&count), NVML_SUCCESS);
    assert_int_equal(count, 2);
    nvmlDevice_t dev;
    assert_int_equal(lib.by_index(1, &dev), NVML_SUCCESS);
    nvmlMemory_t mem;
    assert_int_equal(lib.get_memory(dev, &mem), NVML_SUCCESS);
    assert_int_equal(mem.total, UINT64_C(16) << 30);
    char uuid[96];
    assert_int_equal(lib.get_uuid(dev, uuid, sizeof uuid), NVML_SUCCESS);
    assert_int_equal(strncmp(uuid, "GPU-", 4), 0);
    assert_non_null(lib.procs_v3);
    assert_string_equal(nvml_lib_error(&lib, NVML_SUCCESS), lib.error_string(NVML_SUCCESS));
    nvml_lib_close(&lib);
    assert_false(lib.initialized);
    nvml_lib_close(&lib); /* twice is harmless */
}

static void test_unknown_required_name(void **state)
{
    (void)state;
    static const char *const required[] = {"nvmlDeviceGetCount_v2", "nvmlNoSuchCall", NULL};
    struct nvml_lib lib;
    struct vg_err err = {0};
    assert_int_equal(nvml_lib_open(&lib, FAKEGPU_NVML, required, &err), -EINVAL);
    assert_string_equal(err.msg, "NVML: nvmlNoSuchCall is not in the loader's table");
    assert_true(all_zero(&lib));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_library),
        cmocka_unit_test(test_not_nvml),
        cmocka_unit_test(test_fakegpu),
        cmocka_unit_test(test_unknown_required_name),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
