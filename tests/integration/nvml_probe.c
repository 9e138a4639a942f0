/* NVML client for the integration tests: dlopens libnvidia-ml.so.1 by its SONAME (the
 * test puts build/fakegpu first on LD_LIBRARY_PATH), calls it through typed pointers as
 * a monitor would, and checks what a user of NVML would see. Exits 0 when every check
 * holds, 1 with one line per failed check otherwise.
 *
 *   nvml_probe before-init
 *   nvml_probe discovery
 *   nvml_probe processes DEV PID BYTES    (PID holds exactly BYTES on DEV)
 *   nvml_probe utilization DEV PID PID    (both saturate DEV: ~50 % each, ~100 % device)
 *   nvml_probe mig                        (FAKEGPU_MIG=0:1g.10gb,1g.10gb,3g.40gb;1:2g.10gb)
 *   nvml_probe dynamic                    (FAKEGPU_MIG=0:, GPU 0 an H100 80GB, 1 not MIG):
 *                                          makes a 3g.40gb at start 4 and a 1g.10gb
 *                                          wherever the driver puts it (start 0), checks
 *                                          every refusal, prints the 3g.40gb's MIG UUID
 *   nvml_probe destroy UUID WANT          destroys that MIG device's compute instance,
 *                                          then its GPU instance: WANT is "in-use" (a
 *                                          process runs in it: both refused) or "ok"
 *   nvml_probe xid DEV CODE               (prints "ready", then waits at most 20 s for
 *                                          XID CODE on DEV, injected by fakegpu-ctl) */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include "abi/nvml.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/parse.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "nvml_probe:%d: check failed: %s: ", __LINE__, #cond);                 \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static void *lib;

#define SYM(name) ((__typeof__(&name))sym(#name))

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (p == NULL) {
        fprintf(stderr, "nvml_probe: libnvidia-ml.so.1 does not export %s\n", name);
        exit(1);
    }
    return p;
}

static unsigned long long arg_u64(const char *s)
{
    uint64_t v;
    struct vg_err err;
    if (vg_parse_u64(s, 0, UINT64_MAX, &v, &err) != 0) {
        fprintf(stderr, "nvml_probe: bad number '%s': %s\n", s, err.msg);
        exit(2);
    }
    return v;
}

static int before_init(void)
{
    unsigned count = 7;
    nvmlDevice_t dev = NULL;
    char buf[96];
    nvmlMemory_t mem;
    CHECK(SYM(nvmlDeviceGetCount_v2)(&count) == NVML_ERROR_UNINITIALIZED, "count");
    CHECK(count == 7, "count written before init: %u", count);
    CHECK(SYM(nvmlDeviceGetHandleByIndex_v2)(0, &dev) == NVML_ERROR_UNINITIALIZED, "handle");
    CHECK(SYM(nvmlSystemGetDriverVersion)(buf, sizeof buf) == NVML_ERROR_UNINITIALIZED,
          "driver version");
    CHECK(SYM(nvmlDeviceGetMemoryInfo)(dev, &mem) == NVML_ERROR_UNINITIALIZED, "memory");
    CHECK(SYM(nvmlShutdown)() == NVML_ERROR_UNINITIALIZED, "shutdown without init");
    CHECK(strcmp(SYM(nvmlErrorString)(NVML_ERROR_UNINITIALIZED), "Uninitialized") == 0,
          "error string");
    CHECK(strcmp(SYM(nvmlErrorString)((nvmlReturn_t)12345), "Unknown Error") == 0,
          "unknown error string");
    /* After a balanced init/shutdown, calls are refused again. */
    CHECK(SYM(nvmlInit_v2)() == NVML_SUCCESS, "init");
    CHECK(SYM(nvmlShutdown)() == NVML_SUCCESS, "shutdown");
    CHECK(SYM(nvmlDeviceGetCount_v2)(&count) == NVML_ERROR_UNINITIALIZED, "count after shutdown");
    return failures;
}

static int discovery(void)
{
    CHECK(SYM(nvmlInit_v2)() == NVML_SUCCESS, "init");
    CHECK(SYM(nvmlInitWithFlags)(0) == NVML_SUCCESS, "second init");
    unsigned count = 0;
    CHECK(SYM(nvmlDeviceGetCount_v2)(&count) == NVML_SUCCESS && count == 2, "count %u", count);
    CHECK(SYM(nvmlDeviceGetCount)(&count) == NVML_SUCCESS && count == 2, "v1 count %u", count);

    static const char *names[] = {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"};
    static const unsigned long long totals[] = {81559ULL << 20, 40ULL << 30};
    static const int majors[] = {9, 8};
    char uuids[2][NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char buses[2][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    for (unsigned i = 0; i < 2; i++) {
        nvmlDevice_t dev = NULL, again = NULL;
        CHECK(SYM(nvmlDeviceGetHandleByIndex_v2)(i, &dev) == NVML_SUCCESS, "handle %u", i);
        CHECK(SYM(nvmlDeviceGetHandleByIndex)(i, &again) == NVML_SUCCESS && again == dev,
              "v1 handle %u", i);
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
        CHECK(SYM(nvmlDeviceGetName)(dev, name, sizeof name) == NVML_SUCCESS &&
                  strcmp(name, names[i]) == 0,
              "name '%s'", name);
        CHECK(SYM(nvmlDeviceGetName)(dev, name, 5) == NVML_ERROR_INSUFFICIENT_SIZE, "short name");
        CHECK(SYM(nvmlDeviceGetUUID)(dev, uuids[i], sizeof uuids[i]) == NVML_SUCCESS &&
                  strncmp(uuids[i], "GPU-", 4) == 0 && strlen(uuids[i]) == 40,
              "uuid '%s'", uuids[i]);
        nvmlPciInfo_t pci;
        CHECK(SYM(nvmlDeviceGetPciInfo_v3)(dev, &pci) == NVML_SUCCESS, "pci");
        memcpy(buses[i], pci.busId, sizeof buses[i]);
        CHECK(strlen(pci.busId) == 16 && strncmp(pci.busId, "00000000:", 9) == 0, "busId '%s'",
              pci.busId);
        CHECK(strlen(pci.busIdLegacy) == 12, "busIdLegacy '%s'", pci.busIdLegacy);
        CHECK((pci.pciDeviceId & 0xFFFF) == 0x10DE, "vendor %x", pci.pciDeviceId);
        nvmlMemory_t mem;
        CHECK(SYM(nvmlDeviceGetMemoryInfo)(dev, &mem) == NVML_SUCCESS, "memory");
        CHECK(mem.total == totals[i] && mem.used == 0 && mem.free == totals[i],
              "memory %llu/%llu/%llu", mem.total, mem.used, mem.free);
        nvmlMemory_v2_t mem2 = {.version = nvmlMemory_v2};
        CHECK(SYM(nvmlDeviceGetMemoryInfo_v2)(dev, &mem2) == NVML_SUCCESS &&
                  mem2.total == totals[i] && mem2.free + mem2.used == mem2.total,
              "memory v2");
        mem2.version = 1;
        CHECK(SYM(nvmlDeviceGetMemoryInfo_v2)(dev, &mem2) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
              "memory v2 with a wrong version");
        int major = 0, minor = -1;
        CHECK(SYM(nvmlDeviceGetCudaComputeCapability)(dev, &major, &minor) == NVML_SUCCESS &&
                  major == majors[i] && minor == 0,
              "compute capability %d.%d", major, minor);
        unsigned idx = 99, minor_number = 99, mig = 9, pending = 9;
        CHECK(SYM(nvmlDeviceGetIndex)(dev, &idx) == NVML_SUCCESS && idx == i, "index %u", idx);
        CHECK(SYM(nvmlDeviceGetMinorNumber)(dev, &minor_number) == NVML_SUCCESS, "minor");
        CHECK(SYM(nvmlDeviceGetMigMode)(dev, &mig, &pending) == NVML_SUCCESS &&
                  mig == NVML_DEVICE_MIG_DISABLE && pending == NVML_DEVICE_MIG_DISABLE,
              "mig %u/%u", mig, pending);
        nvmlUtilization_t util = {99, 99};
        CHECK(SYM(nvmlDeviceGetUtilizationRates)(dev, &util) == NVML_SUCCESS && util.gpu == 0,
              "idle utilization %u", util.gpu);
        /* Lookups by UUID and bus id find the same handle. */
        CHECK(SYM(nvmlDeviceGetHandleByUUID)(uuids[i], &again) == NVML_SUCCESS && again == dev,
              "by uuid");
        CHECK(SYM(nvmlDeviceGetHandleByPciBusId_v2)(pci.busId, &again) == NVML_SUCCESS &&
                  again == dev,
              "by bus id");
        CHECK(SYM(nvmlDeviceGetHandleByPciBusId)(pci.busIdLegacy, &again) == NVML_SUCCESS &&
                  again == dev,
              "by legacy bus id");
    }
    CHECK(strcmp(uuids[0], uuids[1]) != 0, "uuids differ");
    CHECK(strcmp(buses[0], buses[1]) != 0, "bus ids differ");

    nvmlDevice_t dev = NULL;
    CHECK(SYM(nvmlDeviceGetHandleByIndex_v2)(2, &dev) == NVML_ERROR_INVALID_ARGUMENT,
          "index past the end");
    CHECK(SYM(nvmlDeviceGetHandleByUUID)("GPU-00000000-0000-0000-0000-000000000000", &dev) ==
              NVML_ERROR_NOT_FOUND,
          "unknown uuid");
    /* Made-up handles are refused, not dereferenced. */
    nvmlMemory_t mem;
    char name[64];
    CHECK(SYM(nvmlDeviceGetMemoryInfo)(NULL, &mem) == NVML_ERROR_INVALID_ARGUMENT, "NULL handle");
    CHECK(SYM(nvmlDeviceGetName)((nvmlDevice_t)&mem, name, sizeof name) ==
              NVML_ERROR_INVALID_ARGUMENT,
          "bogus handle");
    char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int cuda = 0;
    CHECK(SYM(nvmlSystemGetDriverVersion)(version, sizeof version) == NVML_SUCCESS, "driver");
    CHECK(SYM(nvmlSystemGetNVMLVersion)(version, sizeof version) == NVML_SUCCESS, "nvml version");
    CHECK(SYM(nvmlSystemGetCudaDriverVersion_v2)(&cuda) == NVML_SUCCESS && cuda >= 12000,
          "cuda version %d", cuda);
    /* Reference counted: one shutdown of two inits keeps NVML usable. */
    CHECK(SYM(nvmlShutdown)() == NVML_SUCCESS, "first shutdown");
    CHECK(SYM(nvmlDeviceGetCount_v2)(&count) == NVML_SUCCESS, "count after one shutdown");
    CHECK(SYM(nvmlShutdown)() == NVML_SUCCESS, "second shutdown");
    CHECK(SYM(nvmlDeviceGetCount_v2)(&count) == NVML_ERROR_UNINITIALIZED, "count after both");
    return failures;
}

static int processes(unsigned dev_index, unsigned pid, unsigned long long bytes)
{
    CHECK(SYM(nvmlInit_v2)() == NVML_SUCCESS, "init");
    nvmlDevice_t dev = NULL;
    CHECK(SYM(nvmlDeviceGetHandleByIndex_v2)(dev_index, &dev) == NVML_SUCCESS, "handle");
    unsigned n = 0;
    CHECK(SYM(nvmlDeviceGetComputeRunningProcesses_v3)(dev, &n, NULL) ==
                  NVML_ERROR_INSUFFICIENT_SIZE &&
              n == 1,
          "count query gives %u", n);
    nvmlProcessInfo_t infos[8];
    n = 8;
    CHECK(SYM(nvmlDeviceGetComputeRunningProcesses_v3)(dev, &n, infos) == NVML_SUCCESS && n == 1,
          "v3 list has %u entries", n);
    if (n >= 1) {
        CHECK(infos[0].pid == pid, "pid %u, expected %u", infos[0].pid, pid);
        CHECK(infos[0].usedGpuMemory == bytes, "used %llu, expected %llu", infos[0].usedGpuMemory,
              bytes);
        CHECK(infos[0].pid != (unsigned)getpid(), "the NVML reader is listed");
    }
    nvmlProcessInfo_v1_t v1[8];
    n = 8;
    CHECK(SYM(nvmlDeviceGetComputeRunningProcesses)(dev, &n, v1) == NVML_SUCCESS && n == 1 &&
              v1[0].pid == pid && v1[0].usedGpuMemory == bytes,
          "v1 list");
    nvmlMemory_t mem;
    CHECK(SYM(nvmlDeviceGetMemoryInfo)(dev, &mem) == NVML_SUCCESS && mem.used == bytes &&
              mem.free == mem.total - bytes,
          "device memory used %llu", mem.used);
    /* The other device has nobody. */
    nvmlDevice_t other = NULL;
    n = 8;
    CHECK(SYM(nvmlDeviceGetHandleByIndex_v2)(1 - dev_index, &other) == NVML_SUCCESS &&
              SYM(nvmlDeviceGetComputeRunningProcesses_v3)(other, &n, infos) == NVML_SUCCESS &&
              n == 0,
          "other device lists %u", n);
    SYM(nvmlShutdown)();
    return failures;
}

static int utilization(unsigned dev_index, unsigned pid_a, unsigned pid_b)
{
    CHECK(SYM(nvmlInit_v2)() == NVML_SUCCESS, "init");
    nvmlDevice_t dev = NULL;
    CHECK(SYM(nvmlDeviceGetHandleByIndex_v2)(dev_index, &dev) == NVML_SUCCESS, "handle");
    nvmlUtilization_t util = {0, 0};
    CHECK(SYM(nvmlDeviceGetUtilizationRates)(dev, &util) == NVML_SUCCESS && util.gpu >= 95,
          "device utilization %u", util.gpu);
    nvmlProcessUtilizationSample_t samples[8];
    unsigned n = 0;
    CHECK(SYM(nvmlDeviceGetProcessUtilization)(dev, NULL, &n, 0) == NVML_ERROR_INSUFFICIENT_SIZE &&
              n == 2,
          "sample count %u", n);
    n = 8;
    nvmlReturn_t ret = SYM(nvmlDeviceGetProcessUtilization)(dev, samples, &n, 0);
    CHECK(ret == NVML_SUCCESS && n == 2, "samples: ret %d, %u", ret, n);
    for (unsigned i = 0; ret == NVML_SUCCESS && i < n; i++) {
        CHECK(samples[i].pid == pid_a || samples[i].pid == pid_b, "pid %u", samples[i].pid);
        /* Round-robin slices give each about half of the device. */
        CHECK(samples[i].smUtil >= 40 && samples[i].smUtil <= 60, "pid %u smUtil %u",
              samples[i].pid, samples[i].smUtil);
        CHECK(samples[i].timeStamp > 0, "timestamp");
    }
    /* Nothing newer than "now" yet. */
    if (n > 0) {
        unsigned m = 8;
        CHECK(SYM(nvmlDeviceGetProcessUtilization)(
                  dev, samples, &m, samples[0].timeStamp + 60000000ULL) == NVML_ERROR_NOT_FOUND,
              "samples from the future");
    }
    SYM(nvmlShutdown)();
    return failures;
}

static int mig(void)
{
    CHECK(SYM(nvmlInit_v2)() == NVML_SUCCESS, "init");
    static const char *profiles[2][3] = {{"1g.10gb", "1g.10gb", "3g.40gb"}, {"2g.10gb"}};
    static const unsigned counts[2] = {3, 1};
    static const unsigned slices[2][3] = {{1, 1, 3}, {2}};
    /* The driver's profile memory (H100 80GB; A100 40GB for 2g.10gb). */
    static const unsigned long long mib[2][3] = {{9984, 9984, 40448}, {9856}};
    char seen[4][NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    unsigned n_seen = 0;
    for (unsigned i = 0; i < 2; i++) {
        nvmlDevice_t gpu = NULL, m = NULL, parent = NULL, again = NULL;
        CHECK(SYM(nvmlDeviceGetHandleByIndex_v2)(i, &gpu) == NVML_SUCCESS, "handle %u", i);
        unsigned cur = 9, pending = 9, max = 0, is_mig = 9, id = 0;
        CHECK(SYM(nvmlDeviceGetMigMode)(gpu, &cur, &pending) == NVML_SUCCESS &&
                  cur == NVML_DEVICE_MIG_ENABLE && pending == NVML_DEVICE_MIG_ENABLE,
              "GPU %u mig mode %u/%u", i, cur, pending);
        CHECK(SYM(nvmlDeviceGetMaxMigDeviceCount)(gpu, &max) == NVML_SUCCESS && max == 7,
              "GPU %u max MIG devices %u", i, max);
        CHECK(SYM(nvmlDeviceIsMigDeviceHandle)(gpu, &is_mig) == NVML_SUCCESS && is_mig == 0,
              "GPU %u is not a MIG handle", i);
        CHECK(SYM(nvmlDeviceGetGpuInstanceId)(gpu, &id) == NVML_ERROR_NOT_SUPPORTED,
              "GPU handle has no GPU instance");
        for (unsigned k = 0; k < counts[i]; k++) {
            CHECK(SYM(nvmlDeviceGetMigDeviceHandleByIndex)(gpu, k, &m) == NVML_SUCCESS, "MIG %u:%u",
                  i, k);
            CHECK(SYM(nvmlDeviceIsMigDeviceHandle)(m, &is_mig) == NVML_SUCCESS && is_mig == 1,
                  "MIG %u:%u is a MIG handle", i, k);
            CHECK(SYM(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(m, &parent) == NVML_SUCCESS &&
                      parent == gpu,
                  "MIG %u:%u parent", i, k);
            char *uuid = seen[n_seen++];
            CHECK(SYM(nvmlDeviceGetUUID)(m, uuid, NVML_DEVICE_UUID_V2_BUFFER_SIZE) ==
                          NVML_SUCCESS &&
                      strncmp(uuid, "MIG-", 4) == 0 && strlen(uuid) == 40,
                  "MIG uuid '%s'", uuid);
            CHECK(SYM(nvmlDeviceGetHandleByUUID)(uuid, &again) == NVML_SUCCESS && again == m,
                  "MIG %u:%u by uuid", i, k);
            char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], want[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
            snprintf(want, sizeof want, "%s MIG %s",
                     i == 0 ? "NVIDIA H100 80GB HBM3" : "NVIDIA A100-SXM4-40GB", profiles[i][k]);
            CHECK(SYM(nvmlDeviceGetName)(m, name, sizeof name) == NVML_SUCCESS &&
                      strcmp(name, want) == 0,
                  "MIG name '%s'", name);
            nvmlDeviceAttributes_t attr;
            CHECK(SYM(nvmlDeviceGetAttributes_v2)(m, &attr) == NVML_SUCCESS, "attributes");
            CHECK(attr.gpuInstanceSliceCount == slices[i][k] &&
                      attr.computeInstanceSliceCount == slices[i][k] &&
                      attr.memorySizeMB == mib[i][k] && attr.multiprocessorCount > 0,
                  "MIG %u:%u attributes %u/%u slices, %llu MiB", i, k, attr.gpuInstanceSliceCount,
                  attr.computeInstanceSliceCount, attr.memorySizeMB);
            nvmlMemory_t mem;
            CHECK(SYM(nvmlDeviceGetMemoryInfo)(m, &mem) == NVML_SUCCESS &&
                      mem.total == mib[i][k] << 20 && mem.free == mem.total,
                  "MIG memory %llu", mem.total);
            unsigned gi = 0, ci = 9;
            CHECK(SYM(nvmlDeviceGetGpuInstanceId)(m, &gi) == NVML_SUCCESS && gi == k + 1,
                  "GPU instance id %u", gi);
            CHECK(SYM(nvmlDeviceGetComputeInstanceId)(m, &ci) == NVML_SUCCESS && ci == 0,
                  "compute instance id %u", ci);
            /* Whole-GPU queries through a MIG handle are refused. */
            nvmlPciInfo_t pci;
            CHECK(SYM(nvmlDeviceGetPciInfo_v3)(m, &pci) == NVML_ERROR_NOT_SUPPORTED, "pci on MIG");
            CHECK(SYM(nvmlDeviceGetMigDeviceHandleByIndex)(m, 0, &again) ==
                      NVML_ERROR_NOT_SUPPORTED,
                  "MIG of a MIG");
        }
        CHECK(SYM(nvmlDeviceGetMigDeviceHandleByIndex)(gpu, counts[i], &m) == NVML_ERROR_NOT_FOUND,
              "no MIG device past the last");
        CHECK(SYM(nvmlDeviceGetMigDeviceHandleByIndex)(gpu, 7, &m) == NVML_ERROR_INVALID_ARGUMENT,
              "MIG index past the maximum");
    }
    for (unsigned a = 0; a < n_seen; a++)
        for (unsigned b = a + 1; b < n_seen; b++)
            CHECK(strcmp(seen[a], seen[b]) != 0, "MIG uuids differ");
    nvmlDevice_t parent;
    CHECK(SYM(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(NULL, &parent) ==
              NVML_ERROR_INVALID_ARGUMENT,
          "NULL MIG handle");
    return failures;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int xid(unsigned dev_index, unsigned long long code)
{
    CHECK(SYM(nvmlInit_v2)() == NVML_SUCCESS, "init");
    nvmlEventSet_t set = NULL;
    nvmlEventData_t data;
    CHECK(SYM(nvmlEventSetCreate)(&set) == NVML_SUCCESS, "create");
    unsigned count = 0;
    CHECK(SYM(nvmlDeviceGetCount_v2)(&count) == NVML_SUCCESS, "count");
    nvmlDevice_t want = NULL;
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t dev;
        unsigned long long types = 0;
        CHECK(SYM(nvmlDeviceGetHandleByIndex_v2)(i, &dev) == NVML_SUCCESS, "handle");
        CHECK(SYM(nvmlDeviceGetSupportedEventTypes)(dev, &types) == NVML_SUCCESS &&
                  (types & nvmlEventTypeXidCriticalError),
              "supported %llx", types);
        CHECK(SYM(nvmlDeviceRegisterEvents)(dev, nvmlEventTypeClock, set) ==
                  NVML_ERROR_NOT_SUPPORTED,
              "clock events are not simulated");
        CHECK(SYM(nvmlDeviceRegisterEvents)(dev, nvmlEventTypeXidCriticalError, set) ==
                  NVML_SUCCESS,
              "register");
        if (i == dev_index)
            want = dev;
    }
    CHECK(SYM(nvmlDeviceRegisterEvents)(want, nvmlEventTypeXidCriticalError,
                                        (nvmlEventSet_t)&data) == NVML_ERROR_INVALID_ARGUMENT,
          "bogus set");
    /* Nothing yet: a zero timeout returns at once, a 200 ms one waits about that long. */
    CHECK(SYM(nvmlEventSetWait_v2)(set, &data, 0) == NVML_ERROR_TIMEOUT, "empty poll");
    double t0 = now_s();
    CHECK(SYM(nvmlEventSetWait_v2)(set, &data, 200) == NVML_ERROR_TIMEOUT, "empty wait");
    double waited = now_s() - t0;
    CHECK(waited >= 0.19 && waited < 5.0, "a 200 ms wait took %.3f s", waited);
    printf("ready\n");
    fflush(stdout);
    nvmlReturn_t rc = SYM(nvmlEventSetWait)(set, &data, 20000);
    CHECK(rc == NVML_SUCCESS, "wait: %d", rc);
    if (rc == NVML_SUCCESS) {
        CHECK(data.device == want, "event on the wrong device");
        CHECK(data.eventType == nvmlEventTypeXidCriticalError, "type %llx", data.eventType);
        CHECK(data.eventData == code, "XID %llu, want %llu", data.eventData, code);
        CHECK(data.gpuInstanceId == NVML_INVALID_INSTANCE_ID, "gi %u", data.gpuInstanceId);
    }
    CHECK(SYM(nvmlEventSetWait_v2)(set, &data, 0) == NVML_ERROR_TIMEOUT, "delivered once");
    CHECK(SYM(nvmlEventSetFree)(set) == NVML_SUCCESS, "free");
    CHECK(SYM(nvmlEventSetFree)(set) == NVML_ERROR_INVALID_ARGUMENT, "double free refused");
    CHECK(SYM(nvmlEventSetWait_v2)(set, &data, 0) == NVML_ERROR_INVALID_ARGUMENT,
          "freed set refused");
    return failures;
}

#define GI_1G  19 /* profile ids on an H100 80GB */
#define GI_1G2 15
#define GI_3G  9

static int dynamic(void)
{
    CHECK(SYM(nvmlInit_v2)() == NVML_SUCCESS, "init");
    nvmlDevice_t gpu = NULL, other = NULL, m = NULL;
    CHECK(SYM(nvmlDeviceGetHandleByIndex_v2)(0, &gpu) == NVML_SUCCESS, "handle 0");
    CHECK(SYM(nvmlDeviceGetHandleByIndex_v2)(1, &other) == NVML_SUCCESS, "handle 1");
    unsigned cur = 9, pending = 9;
    CHECK(SYM(nvmlDeviceGetMigMode)(gpu, &cur, &pending) == NVML_SUCCESS &&
              cur == NVML_DEVICE_MIG_ENABLE,
          "MIG mode %u", cur);
    CHECK(SYM(nvmlDeviceGetMigDeviceHandleByIndex)(gpu, 0, &m) == NVML_ERROR_NOT_FOUND,
          "no MIG device yet");

    /* Profile info by the enum; the id it returns is what the other calls take. */
    nvmlGpuInstanceProfileInfo_t pi;
    static const struct {
        unsigned profile, id, slices, count, sms;
        unsigned long long mib;
    } want[] = {{NVML_GPU_INSTANCE_PROFILE_1_SLICE, GI_1G, 1, 7, 16, 9984},
                {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, GI_1G2, 1, 4, 26, 20096},
                {NVML_GPU_INSTANCE_PROFILE_3_SLICE, GI_3G, 3, 2, 60, 40448},
                {NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 1, 132, 81152}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        memset(&pi, 0xff, sizeof pi);
        CHECK(SYM(nvmlDeviceGetGpuInstanceProfileInfo)(gpu, want[i].profile, &pi) == NVML_SUCCESS &&
                  pi.id == want[i].id && pi.sliceCount == want[i].slices &&
                  pi.instanceCount == want[i].count && pi.multiprocessorCount == want[i].sms &&
                  pi.memorySizeMB == want[i].mib,
              "profile %u: id %u slices %u count %u sms %u %llu MiB", want[i].profile, pi.id,
              pi.sliceCount, pi.instanceCount, pi.multiprocessorCount, pi.memorySizeMB);
    }
    CHECK(SYM(nvmlDeviceGetGpuInstanceProfileInfo)(gpu, NVML_GPU_INSTANCE_PROFILE_8_SLICE, &pi) ==
              NVML_ERROR_NOT_SUPPORTED,
          "no 8-slice profile on an H100");
    CHECK(SYM(nvmlDeviceGetGpuInstanceProfileInfo)(gpu, 99, &pi) == NVML_ERROR_INVALID_ARGUMENT,
          "unknown profile enum");
    CHECK(SYM(nvmlDeviceGetGpuInstanceProfileInfo)(other, 0, &pi) == NVML_ERROR_NOT_SUPPORTED,
          "GPU not in MIG mode");

    /* Possible placements by profile id: all of them, taken or not. */
    nvmlGpuInstancePlacement_t pl[8];
    unsigned n = 0;
    CHECK(SYM(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(gpu, GI_3G, NULL, &n) ==
                  NVML_SUCCESS &&
              n == 2,
          "3g placements count %u", n);
    n = 8;
    CHECK(SYM(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(gpu, GI_3G, pl, &n) == NVML_SUCCESS &&
              n == 2 && pl[0].start == 0 && pl[0].size == 4 && pl[1].start == 4 && pl[1].size == 4,
          "3g placements");
    n = 8;
    CHECK(SYM(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(gpu, GI_1G2, pl, &n) == NVML_SUCCESS &&
              n == 4 && pl[3].start == 6 && pl[3].size == 2,
          "1g.20gb placements %u", n);
    n = 1;
    CHECK(SYM(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(gpu, GI_1G, pl, &n) ==
                  NVML_ERROR_INSUFFICIENT_SIZE &&
              n == 7,
          "short buffer %u", n);
    CHECK(SYM(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(gpu, 77, pl, &n) ==
              NVML_ERROR_INVALID_ARGUMENT,
          "unknown profile id");

    /* A GPU instance at a placement; the refusals the hardware gives. */
    nvmlGpuInstance_t gi3 = NULL, gi1 = NULL, bad = NULL;
    nvmlGpuInstancePlacement_t at = {.start = 4, .size = 4};
    CHECK(SYM(nvmlDeviceCreateGpuInstanceWithPlacement)(gpu, GI_3G, &at, &gi3) == NVML_SUCCESS,
          "3g.40gb at 4");
    CHECK(SYM(nvmlDeviceCreateGpuInstanceWithPlacement)(gpu, GI_3G, &at, &bad) ==
              NVML_ERROR_INSUFFICIENT_RESOURCES,
          "occupied placement");
    nvmlGpuInstancePlacement_t overlap = {.start = 5, .size = 1};
    CHECK(SYM(nvmlDeviceCreateGpuInstanceWithPlacement)(gpu, GI_1G, &overlap, &bad) ==
              NVML_ERROR_INSUFFICIENT_RESOURCES,
          "overlapping placement");
    nvmlGpuInstancePlacement_t not_allowed = {.start = 7, .size = 1};
    CHECK(SYM(nvmlDeviceCreateGpuInstanceWithPlacement)(gpu, GI_1G, &not_allowed, &bad) ==
              NVML_ERROR_INVALID_ARGUMENT,
          "start 7 is no 1g placement");
    nvmlGpuInstancePlacement_t wrong_size = {.start = 0, .size = 2};
    CHECK(SYM(nvmlDeviceCreateGpuInstanceWithPlacement)(gpu, GI_1G, &wrong_size, &bad) ==
              NVML_ERROR_INVALID_ARGUMENT,
          "size differs from the profile's");
    CHECK(SYM(nvmlDeviceCreateGpuInstance)(other, GI_1G, &bad) == NVML_ERROR_NOT_SUPPORTED,
          "GPU not in MIG mode");
    CHECK(SYM(nvmlDeviceCreateGpuInstance)(gpu, 0, &bad) == NVML_ERROR_INSUFFICIENT_RESOURCES,
          "7g.80gb next to a 3g.40gb");
    CHECK(SYM(nvmlDeviceCreateGpuInstance)(gpu, GI_1G, &gi1) == NVML_SUCCESS, "1g.10gb anywhere");
    unsigned left = 9;
    CHECK(SYM(nvmlDeviceGetGpuInstanceRemainingCapacity)(gpu, GI_1G, &left) == NVML_SUCCESS &&
              left == 3,
          "1g.10gb left: %u", left);
    nvmlGpuInstanceInfo_t gii;
    CHECK(SYM(nvmlGpuInstanceGetInfo)(gi3, &gii) == NVML_SUCCESS && gii.device == gpu &&
              gii.profileId == GI_3G && gii.placement.start == 4 && gii.placement.size == 4 &&
              gii.id > 0,
          "3g info: profile %u at %u+%u", gii.profileId, gii.placement.start, gii.placement.size);
    unsigned id3 = gii.id;
    CHECK(SYM(nvmlGpuInstanceGetInfo)(gi1, &gii) == NVML_SUCCESS && gii.placement.start == 0 &&
              gii.id != id3,
          "1g placed first fit: at %u", gii.placement.start);
    nvmlGpuInstance_t by_id = NULL, list[7];
    CHECK(SYM(nvmlDeviceGetGpuInstanceById)(gpu, id3, &by_id) == NVML_SUCCESS && by_id == gi3,
          "by id");
    n = 0;
    CHECK(SYM(nvmlDeviceGetGpuInstances)(gpu, GI_3G, list, &n) == NVML_SUCCESS && n == 1 &&
              list[0] == gi3,
          "3g instances %u", n);
    /* No compute instance yet: no MIG device. */
    for (unsigned k = 0; k < 7; k++)
        CHECK(SYM(nvmlDeviceGetMigDeviceHandleByIndex)(gpu, k, &m) == NVML_ERROR_NOT_FOUND,
              "MIG device %u before its compute instance", k);

    /* The compute instance spanning the GPU instance. */
    nvmlComputeInstanceProfileInfo_t cpi;
    CHECK(SYM(nvmlGpuInstanceGetComputeInstanceProfileInfo)(
              gi3, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
              NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cpi) == NVML_SUCCESS &&
              cpi.sliceCount == 3 && cpi.multiprocessorCount == 60,
          "CI profile %u slices %u SMs", cpi.sliceCount, cpi.multiprocessorCount);
    CHECK(SYM(nvmlGpuInstanceGetComputeInstanceProfileInfo)(
              gi3, NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
              NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cpi) == NVML_ERROR_NOT_SUPPORTED,
          "CI larger than its GPU instance");
    nvmlComputeInstance_t ci = NULL, ci2 = NULL;
    CHECK(SYM(nvmlGpuInstanceCreateComputeInstance)(gi3, cpi.id, &ci) == NVML_SUCCESS, "CI");
    CHECK(SYM(nvmlGpuInstanceCreateComputeInstance)(gi3, cpi.id, &ci2) ==
              NVML_ERROR_INSUFFICIENT_RESOURCES,
          "second CI");
    nvmlComputeInstanceInfo_t cii;
    CHECK(SYM(nvmlComputeInstanceGetInfo_v2)(ci, &cii) == NVML_SUCCESS && cii.gpuInstance == gi3 &&
              cii.device == gpu,
          "CI info");
    CHECK(SYM(nvmlGpuInstanceDestroy)(gi3) == NVML_ERROR_IN_USE, "GI with a CI");

    /* Now a MIG device, with the instance's memory, SMs and ids. */
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    unsigned found = 0;
    for (unsigned k = 0; k < 7; k++) {
        if (SYM(nvmlDeviceGetMigDeviceHandleByIndex)(gpu, k, &m) != NVML_SUCCESS)
            continue;
        found++;
        nvmlDeviceAttributes_t attr;
        unsigned gid = 0;
        CHECK(SYM(nvmlDeviceGetUUID)(m, uuid, sizeof uuid) == NVML_SUCCESS &&
                  strncmp(uuid, "MIG-", 4) == 0,
              "uuid");
        CHECK(SYM(nvmlDeviceGetAttributes_v2)(m, &attr) == NVML_SUCCESS &&
                  attr.memorySizeMB == 40448 && attr.multiprocessorCount == 60 &&
                  attr.gpuInstanceSliceCount == 3,
              "attributes %llu MiB %u SMs", attr.memorySizeMB, attr.multiprocessorCount);
        CHECK(SYM(nvmlDeviceGetGpuInstanceId)(m, &gid) == NVML_SUCCESS && gid == id3, "gi id");
    }
    CHECK(found == 1, "%u MIG devices, want 1", found);
    CHECK(SYM(nvmlShutdown)() == NVML_SUCCESS, "shutdown");
    if (failures == 0)
        printf("%s\n", uuid);
    return failures;
}

/* Destroys MIG device uuid's compute instance and GPU instance from another process. */
static int destroy(const char *uuid, const char *want)
{
    bool in_use = strcmp(want, "in-use") == 0;
    CHECK(SYM(nvmlInit_v2)() == NVML_SUCCESS, "init");
    nvmlDevice_t m = NULL, gpu = NULL;
    CHECK(SYM(nvmlDeviceGetHandleByUUID)(uuid, &m) == NVML_SUCCESS, "MIG device %s", uuid);
    unsigned gid = 0;
    nvmlGpuInstance_t gi = NULL;
    nvmlComputeInstance_t ci[1] = {NULL};
    unsigned n = 0;
    nvmlGpuInstanceInfo_t info;
    CHECK(SYM(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(m, &gpu) == NVML_SUCCESS &&
              SYM(nvmlDeviceGetGpuInstanceId)(m, &gid) == NVML_SUCCESS &&
              SYM(nvmlDeviceGetGpuInstanceById)(gpu, gid, &gi) == NVML_SUCCESS &&
              SYM(nvmlGpuInstanceGetInfo)(gi, &info) == NVML_SUCCESS,
          "its GPU instance");
    CHECK(SYM(nvmlGpuInstanceGetComputeInstances)(gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, ci,
                                                  &n) == NVML_SUCCESS &&
              n == 1,
          "its compute instance");
    if (failures)
        return failures;
    nvmlReturn_t rc = SYM(nvmlComputeInstanceDestroy)(ci[0]);
    CHECK(rc == (in_use ? NVML_ERROR_IN_USE : NVML_SUCCESS), "CI destroy: %d", rc);
    rc = SYM(nvmlGpuInstanceDestroy)(gi);
    CHECK(rc == (in_use ? NVML_ERROR_IN_USE : NVML_SUCCESS), "GI destroy: %d", rc);
    if (!in_use) {
        CHECK(SYM(nvmlDeviceGetHandleByUUID)(uuid, &m) == NVML_ERROR_NOT_FOUND, "gone");
        CHECK(SYM(nvmlGpuInstanceGetInfo)(gi, &info) == NVML_ERROR_INVALID_ARGUMENT,
              "stale handle");
        /* Its placement is free again. */
        nvmlGpuInstancePlacement_t at = {.start = 4, .size = 4};
        CHECK(SYM(nvmlDeviceCreateGpuInstanceWithPlacement)(gpu, GI_3G, &at, &gi) == NVML_SUCCESS &&
                  SYM(nvmlGpuInstanceDestroy)(gi) == NVML_SUCCESS,
              "placement reusable");
    }
    return failures;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: nvml_probe before-init|discovery|processes|utilization ...\n");
        return 2;
    }
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "nvml_probe: %s\n", dlerror());
        return 1;
    }
    int rc;
    if (strcmp(argv[1], "before-init") == 0)
        rc = before_init();
    else if (strcmp(argv[1], "discovery") == 0)
        rc = discovery();
    else if (strcmp(argv[1], "processes") == 0 && argc == 5)
        rc = processes((unsigned)arg_u64(argv[2]), (unsigned)arg_u64(argv[3]), arg_u64(argv[4]));
    else if (strcmp(argv[1], "utilization") == 0 && argc == 5)
        rc = utilization((unsigned)arg_u64(argv[2]), (unsigned)arg_u64(argv[3]),
                         (unsigned)arg_u64(argv[4]));
    else if (strcmp(argv[1], "mig") == 0)
        rc = mig();
    else if (strcmp(argv[1], "dynamic") == 0)
        rc = dynamic();
    else if (strcmp(argv[1], "destroy") == 0 && argc == 4)
        rc = destroy(argv[2], argv[3]);
    else if (strcmp(argv[1], "xid") == 0 && argc == 4)
        rc = xid((unsigned)arg_u64(argv[2]), arg_u64(argv[3]));
    else {
        fprintf(stderr, "nvml_probe: bad arguments\n");
        return 2;
    }
    if (rc == 0 && strcmp(argv[1], "dynamic") != 0) /* dynamic prints the UUID alone */
        printf("nvml_probe %s: ok\n", argv[1]);
    return rc == 0 ? 0 : 1;
}
