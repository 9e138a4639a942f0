/* Fuzz target for the watch stream decoder: the input is a watch response body, fed to
 * the line splitter in pieces whose sizes come from the input's first byte, and every
 * complete line is decoded as a watch event. No crash, no read past the input, no leak,
 * and every decoded event is self-consistent. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t refused; /* lines kube_event_decode refused */

static int decode_line(void *arg, const char *line, size_t len)
{
    size_t *events = arg;
    struct kube_event event;
    struct vg_err err;
    if (len == 0 || memchr(line, '\n', len) != NULL)
        abort();
    if (kube_event_decode(line, len, &event, &err) == 0) {
        if (event.object == NULL)
            abort();
        if ((event.type == KUBE_EVENT_ERROR) != (event.resource_version == NULL))
            abort();
        (*events)++;
        kube_event_release(&event);
    } else if (err.code >= 0 || err.msg[0] == '\0') {
        abort();
    } else {
        refused++;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t piece = (size_t)data[0] % 17 + 1;
    data++;
    size--;
    struct kube_lines lines;
    kube_lines_init(&lines, 4096);
    size_t events = 0;
    refused = 0;
    struct vg_err err;
    for (size_t off = 0; off < size; off += piece) {
        size_t n = size - off < piece ? size - off : piece;
        int rc = kube_lines_feed(&lines, (const char *)data + off, n, decode_line, &events, &err);
        if (rc != 0) {
            if (!lines.overflow)
                abort();
            break;
        }
        if (lines.tail.len > 4096)
            abort();
    }
    /* Accepted: at least one event, every line decoded, nothing too long. */
    vg_fuzz_report(events > 0 && refused == 0 && !lines.overflow);
    kube_lines_release(&lines);
    return 0;
}
