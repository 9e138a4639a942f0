/* HTTP answers (http.h). */
#include "scheduler/http.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <string.h>

void sched_http_reply(struct evhttp_request *req, int code, const char *reason, const char *ctype,
                      const char *text)
{
    struct evbuffer *b = evbuffer_new();
    if (text != NULL)
        evbuffer_add(b, text, strlen(text));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    evhttp_send_reply(req, code, reason, b);
    evbuffer_free(b);
}
