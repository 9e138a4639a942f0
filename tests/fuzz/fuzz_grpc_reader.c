/* Fuzzes the gRPC message reassembly the server and client run on DATA payloads: the
 * input is split into chunks (each chunk's length comes from one input byte) and fed to
 * a grpc_reader with a small ceiling, so both the length check and delivery paths are
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

static enum grpc_status_code sink(void *arg, const uint8_t *msg, size_t len)
{
    size_t *total = arg;
    if (len > FUZZ_MAX || (len > 0 && msg == NULL))
        abort();
    *total += len;
    /* A message starting with 0xee stops the reader, as a handler refusing it would. */
    return len > 0 && msg[0] == 0xee ? GRPC_STATUS_INVALID_ARGUMENT : GRPC_STATUS_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct grpc_reader r;
    size_t total = 0;
    grpc_reader_init(&r, FUZZ_MAX);
    size_t at = 0;
    bool failed = false;
    while (at < size) {
        size_t chunk = data[at++] % 64 + 1;
        if (chunk > size - at)
            chunk = size - at;
        enum grpc_status_code st = grpc_reader_feed(&r, data + at, chunk, sink, &total, NULL);
        if (failed && st == GRPC_STATUS_OK)
            abort(); /* refusals are sticky */
        if (st != GRPC_STATUS_OK) {
            failed = true;
            if (r.body != NULL && st != GRPC_STATUS_INVALID_ARGUMENT)
                abort();
        }
        at += chunk;
    }
    /* Accepted: every message delivered, nothing left over. */
    vg_fuzz_report(grpc_reader_finish(&r, NULL) == GRPC_STATUS_OK && !failed);
    grpc_reader_release(&r);

    char text[64];
    size_t n = size < sizeof text - 1 ? size : sizeof text - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    uint64_t ms;
    grpc_timeout_parse(text, &ms, NULL);
    char decoded[32];
    size_t len = grpc_percent_decode((const char *)data, size, decoded, sizeof decoded);
    if (len >= sizeof decoded || decoded[len] != '\0')
        abort();
    char encoded[256];
    grpc_percent_encode((const char *)data, size < 64 ? size : 64, encoded, sizeof encoded);
    return 0;
}
