/* The scheduler daemon's HTTP answers that carry a whole body at once (the daemon and the
 * dashboard share them). */
#ifndef VGPU_SCHEDULER_HTTP_H
#define VGPU_SCHEDULER_HTTP_H

#include <event2/http.h>

/* Sends code/reason with text (NULL: no body) as ctype. */
void sched_http_reply(struct evhttp_request *req, int code, const char *reason, const char *ctype,
                      const char *text);

#endif
