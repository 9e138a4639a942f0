/* The dashboard over HTTP (dashboard.h). */
#include "scheduler/dashboard.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/auto.h"
#include "base/auto_json.h"
#include "base/str.h"
#include "scheduler/http.h"
#include "scheduler/view.h"

/* The page, compiled in from ui/index.html (cmake/embed.cmake). */
extern const unsigned char sched_ui_page[];
extern const size_t sched_ui_page_len;

static void free_text(const void *data, size_t len, void *arg)
{
    (void)len;
    (void)arg;
    free((void *)(uintptr_t)data);
}

/* A 4xx on a /ui path: JSON {"Error": msg} for the JSON routes, text for the page. */
static void ui_error(struct sched_dashboard *ui, struct evhttp_request *req, int code,
                     const char *reason, bool json, const char *msg)
{
    ui->errors++;
    if (!json) {
        char text[VG_ERR_MSG_MAX + 64];
        (void)vg_snprintf(text, sizeof text, "%s\n", msg);
        sched_http_reply(req, code, reason, "text/plain; charset=utf-8", text);
        return;
    }
    VG_AUTO_JSON json_t *body = json_pack("{s:s}", "Error", msg);
    VG_AUTO_FREE char *text = json_dumps(body, JSON_COMPACT);
    sched_http_reply(req, code, reason, "application/json", text);
}

/* Headers every /ui answer carries: nothing cached, nothing framed or sniffed, and the
 * page may run its own script only and talk to this origin only. */
static void ui_headers(struct sched_dashboard *ui, struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Cache-Control", "no-store");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
    evhttp_add_header(h, "Content-Security-Policy", ui->csp);
}

/* GET /ui/explain?namespace=NS&pod=NAME (namespace defaults to "default"). */
static void serve_explain(struct sched_dashboard *ui, struct evhttp_request *req)
{
    /* The request's own parsed URI may be missing (a URI libevent's strict parser
     * declines): parse it here; no query then. */
    struct evhttp_uri *uri = evhttp_uri_parse(evhttp_request_get_uri(req));
    const char *query = uri != NULL ? evhttp_uri_get_query(uri) : NULL;
    char key[2 * 253 + 2]; /* "ns/name" */
    struct vg_err err = {0};
    int rc = sched_view_explain_key(query, key, sizeof key, &err);
    if (uri != NULL)
        evhttp_uri_free(uri);
    if (rc < 0) {
        ui_error(ui, req, 400, "Bad Request", true, err.msg);
        return;
    }
    VG_AUTO_FREE char *text = sched_view_explain(ui->state, key);
    if (text == NULL) {
        char msg[VG_ERR_MSG_MAX + sizeof key];
        (void)vg_snprintf(msg, sizeof msg,
                          "vgpu: pod %s is not known to the scheduler (not waiting for a node, "
                          "holding no GPU share, never filtered)",
                          key);
        ui_error(ui, req, 404, "Not Found", true, msg);
        return;
    }
    sched_http_reply(req, 200, "OK", "application/json", text);
}

/* /ui (the page), /ui/state.json, /ui/explain: GET or HEAD only. */
void sched_dashboard_serve(struct sched_dashboard *ui, struct evhttp_request *req, const char *p,
                           enum evhttp_cmd_type method)
{
    ui_headers(ui, req);
    bool page = strcmp(p, "/ui") == 0 || strcmp(p, "/ui/") == 0;
    bool state = strcmp(p, "/ui/state.json") == 0;
    bool explain = strcmp(p, "/ui/explain") == 0;
    if (!page && !state && !explain) {
        ui_error(ui, req, 404, "Not Found", false,
                 "not found: the dashboard serves /ui, /ui/state.json and /ui/explain");
        return;
    }
    if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
        ui_error(ui, req, 405, "Method Not Allowed", !page,
                 "vgpu: the dashboard is read-only: GET only");
        return;
    }
    if (explain) {
        serve_explain(ui, req);
        return;
    }
    if (page) {
        struct evbuffer *b = evbuffer_new();
        evbuffer_add_reference(b, sched_ui_page, sched_ui_page_len, NULL, NULL);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                          "text/html; charset=utf-8");
        evhttp_send_reply(req, 200, "OK", b);
        evbuffer_free(b);
        return;
    }
    char *text = sched_view_state(ui->state, (int64_t)time(NULL));
    if (text == NULL) {
        sched_http_reply(req, 500, "Internal Server Error", "text/plain", "out of memory\n");
        return;
    }
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_reference(b, text, strlen(text), free_text, NULL);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

/* The page's script, hashed for its Content-Security-Policy (script-src 'sha256-...'):
 * the one inline script runs, anything else that got into the page would not. */
void sched_dashboard_init(struct sched_dashboard *ui, const struct sched_state *state)
{
    ui->state = state;
    ui->errors = 0;
    const char *page = (const char *)sched_ui_page;
    const char *open = strstr(page, "<script>");
    const char *close = open != NULL ? strstr(open, "</script>") : NULL;
    unsigned char digest[SHA256_DIGEST_LENGTH];
    unsigned char b64[4 * ((SHA256_DIGEST_LENGTH + 2) / 3) + 1];
    if (open == NULL || close == NULL) {
        (void)vg_strlcpy(ui->csp, "default-src 'none'", sizeof ui->csp);
        return;
    }
    open += strlen("<script>");
    SHA256((const unsigned char *)open, (size_t)(close - open), digest);
    EVP_EncodeBlock(b64, digest, SHA256_DIGEST_LENGTH);
    (void)vg_snprintf(ui->csp, sizeof ui->csp,
                      "default-src 'none'; script-src 'sha256-%s'; style-src 'unsafe-inline'; "
                      "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
                      "frame-ancestors 'none'",
                      b64);
}
