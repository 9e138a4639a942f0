/* Fuzz target for vgpu-monitor's HTTP request parser (mon_http_parse): any bytes on the
 * metrics port give a complete GET/HEAD of /metrics or /healthz, "not yet complete"
 * (only under MON_HTTP_HEAD_MAX bytes and without a blank line), or an HTTP error status
 * the server answers with. Whatever is accepted stays accepted with more bytes after it
 * (a body is never needed to decide). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "monitor/http.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mon_http_request req;
    int rc = mon_http_parse((const char *)data, size, &req);
    vg_fuzz_report(rc == 0);
    switch (rc) {
    case 0:
        if (req.route != MON_HTTP_METRICS && req.route != MON_HTTP_HEALTHZ)
            abort();
        break;
    case -EAGAIN:
        if (size >= MON_HTTP_HEAD_MAX)
            abort();
        break;
    case -400:
    case -404:
    case -405:
    case -431:
    case -505:
        break;
    default:
        abort();
    }
    if (rc == 0) {
        uint8_t *more = malloc(size + 8);
        if (!more)
            return 0;
        memcpy(more, data, size);
        memcpy(more + size, "trailing", 8);
        struct mon_http_request again;
        if (mon_http_parse((const char *)more, size + 8, &again) != 0 || again.route != req.route ||
            again.head != req.head)
            abort();
        free(more);
    }
    return 0;
}
