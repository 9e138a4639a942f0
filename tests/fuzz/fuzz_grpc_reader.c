/* Fuzzes the gRPC message reassembly the server and client run on DATA payloads: the
 * input is split into chunks (each chunk's length comes from one input byte) and fed to
 * a vgrpc_reader with a small ceiling, so both the length check and delivery paths are
 * reached. The grpc-timeout parser and percent-decoder get the same bytes. Properties
 * checked: delivered messages never exceed the ceiling, a refusal is sticky, and the
 * reader holds no body after it fails. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/wire.h"
#include "verdict.h"

#define FUZZ_MAX 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static enum vgrpc_status_code sink(void *arg, const uint8_t *msg, size_t len)
{
    size_t *total = arg;
    if (len > FUZZ_MAX || (len > 0 && msg == NULL))
        abort();
    *total += len;
    /* A message starting with 0xee stops the reader, as a handler refusing it would. */
    return len > 0 && msg[0] == 0xee ? VGRPC_STATUS_INVALID_ARGUMENT : VGRPC_STATUS_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vgrpc_reader r;
    size_t total = 0;
    vgrpc_reader_init(&r, FUZZ_MAX);
    size_t at = 0;
    bool failed = false;
    while (at < size) {
        size_t chunk = data[at++] % 64 + 1;
        if (chunk > size - at)
            chunk = size - at;
        enum vgrpc_status_code st = vgrpc_reader_feed(&r, data + at, chunk, sink, &total, NULL);
        if (failed && st == VGRPC_STATUS_OK)
            abort(); /* refusals are sticky */
        if (st != VGRPC_STATUS_OK) {
            failed = true;
            if (r.body != NULL && st != VGRPC_STATUS_INVALID_ARGUMENT)
                abort();
        }
        at += chunk;
    }
    /* Accepted: every message delivered, nothing left over. */
    vg_fuzz_report(vgrpc_reader_finish(&r, NULL) == VGRPC_STATUS_OK && !failed);
    vgrpc_reader_release(&r);

    char text[64];
    size_t n = size < sizeof text - 1 ? size : sizeof text - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    uint64_t ms;
    vgrpc_timeout_parse(text, &ms, NULL);
    char decoded[32];
    size_t len = vgrpc_percent_decode((const char *)data, size, decoded, sizeof decoded);
    if (len >= sizeof decoded || decoded[len] != '\0')
        abort();
    char encoded[256];
    vgrpc_percent_encode((const char *)data, size < 64 ? size : 64, encoded, sizeof encoded);
    return 0;
}
