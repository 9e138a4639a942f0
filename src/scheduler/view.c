/* What vgpu-scheduler shows of its model (view.h): the dashboard's state JSON and the
 * filter verdicts kept per pod, read only (the allocation metrics are metrics.c's) (the verdict
 * store that filter writes is pending.c's). */
#include "scheduler/view.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "annot/annot.h"
#include "base/auto.h"
#include "base/auto_json.h"
#include "base/mem.h"
#include "base/str.h"
#include "scheduler/internal.h"

#define MIB 1048576ull

static json_t *verdict_json(const struct sched_verdict *v)
{
    json_t *reasons = json_array();
    for (unsigned r = 0; r < v->reason_count; r++) {
        const struct sched_verdict_reason *re = &v->reasons[r];
        json_t *nodes = json_array();
        for (unsigned k = 0; k < re->count && k < SCHED_VERDICT_EXAMPLES; k++)
            json_array_append_new(nodes, json_string(re->nodes[k]));
        json_array_append_new(reasons, json_pack("{s:s, s:I, s:o}", "reason", re->why, "nodes",
                                                 (json_int_t)re->count, "examples", nodes));
    }
    json_t *o =
        json_pack("{s:I, s:I, s:I, s:o}", "time", (json_int_t)v->time, "offered",
                  (json_int_t)v->offered, "failed", (json_int_t)v->failed, "reasons", reasons);
    json_object_set_new(o, "node", v->node[0] != '\0' ? json_string(v->node) : json_null());
    json_object_set_new(o, "error", json_string(v->error));
    if (v->other_reasons > 0)
        json_object_set_new(o, "otherReasons", json_integer((json_int_t)v->other_reasons));
    return o;
}

char *sched_view_verdict(const struct sched_state *s, const char *key)
{
    const struct sched_verdict *v = sched_map_get(&s->verdicts, key);
    if (v == NULL)
        return NULL;
    VG_AUTO_JSON json_t *o = verdict_json(v);
    return json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
}

/* ---- the model as the views read it (internal.h; metrics.c reads it too) ---------------- */

void sched_gpu_view(const struct sched_state *s, size_t i, unsigned g, struct sched_gpu_view *out)
{
    const struct place_gpu *gpu = &s->cluster->nodes[i].gpus[g];
    out->mem_total = gpu->mem_total_mib * MIB;
    out->mem_used = gpu->mem_used_mib * MIB;
    uint32_t milli = gpu->milli_used > 1000 ? 1000 : gpu->milli_used;
    out->compute_used = milli / 1000.0;
    bool partly = gpu->tenants > 0 && milli < 1000;
    out->stranded_compute = partly ? (1000 - milli) / 1000.0 : 0;
    out->stranded_mem =
        partly && gpu->mem_total_mib > gpu->mem_used_mib ? out->mem_total - out->mem_used : 0;
    out->blocked = sched_gpu_blocked(s, (int32_t)i, g);
}

void sched_node_totals(const struct sched_state *s, size_t i, struct sched_totals *t)
{
    const struct place_node *n = &s->cluster->nodes[i];
    for (unsigned g = 0; g < n->gpu_count; g++) {
        struct sched_gpu_view v;
        sched_gpu_view(s, i, g, &v);
        t->gpus++;
        t->mem_total += v.mem_total;
        t->mem_used += v.mem_used;
        t->stranded_mem += v.stranded_mem;
        t->compute_total += 1.0;
        t->compute_used += v.compute_used;
        t->stranded += v.stranded_compute;
        t->containers += n->gpus[g].tenants;
    }
}

void sched_totals_add(struct sched_totals *all, const struct sched_totals *t)
{
    all->gpus += t->gpus;
    all->mem_total += t->mem_total;
    all->mem_used += t->mem_used;
    all->stranded_mem += t->stranded_mem;
    all->compute_total += t->compute_total;
    all->compute_used += t->compute_used;
    all->stranded += t->stranded;
    all->containers += t->containers;
}

double sched_frag_ratio(const struct sched_totals *t)
{
    double free_compute = t->compute_total - t->compute_used;
    return free_compute > 1e-9 ? t->stranded / free_compute : 0.0;
}

void sched_each_share(const struct sched_state *s, sched_share_fn fn, void *arg)
{
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        const struct sched_pod *p = s->pods.slots[i].value;
        if (!p->applied || p->node < 0 || (size_t)p->node >= s->cluster->node_count)
            continue;
        const struct place_node *n = &s->cluster->nodes[p->node];
        const char *name = p->names != NULL ? p->names : "";
        for (unsigned k = 0; k < p->share_count; k++) {
            const struct sched_share *sh = &p->shares[k];
            for (unsigned j = 0; j < sh->gpu_count; j++)
                if (sh->gpus[j] < n->gpu_count) {
                    struct sched_share_ref r = {
                        p, k, name, sh->gpus[j], sh->mem[j], sh->milli / 10, sh->high};
                    fn(arg, &r);
                }
            if (p->names != NULL)
                name += strlen(name) + 1;
        }
    }
}

/* ---- the dashboard's state ---------------------------------------------------------- */

struct named_index {
    const char *name;
    size_t index;
};

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const struct named_index *)a)->name, ((const struct named_index *)b)->name);
}

/* The state JSON is written directly (4,000 GPUs and 12,000 containers: building a
 * jansson tree first took several times longer). */
struct jw {
    struct vg_buf b;
    struct vg_err err;
    int rc;
};

static void jraw(struct jw *w, const char *s, size_t n)
{
    if (w->rc == 0)
        w->rc = vg_buf_append(&w->b, s, n, &w->err);
}

static void jlit(struct jw *w, const char *s)
{
    jraw(w, s, strlen(s));
}

static void jf(struct jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jf(struct jw *w, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof tmp)
        jraw(w, tmp, (size_t)n);
}

/* A JSON string of n bytes of s (UTF-8 as the API gave it; control bytes escaped). */
static void jstr_n(struct jw *w, const char *s, size_t n)
{
    jraw(w, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        jraw(w, s + run, i - run);
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            jraw(w, e, 2);
        } else {
            jf(w, "\\u%04x", c);
        }
        run = i + 1;
    }
    jraw(w, s + run, n - run);
    jraw(w, "\"", 1);
}

static void jstr(struct jw *w, const char *s)
{
    jstr_n(w, s, strlen(s));
}

static void totals_write(struct jw *w, const struct sched_totals *t)
{
    jf(w, "\"gpus\":%llu,\"memTotalBytes\":%llu,\"memAllocatedBytes\":%llu,",
       (unsigned long long)t->gpus, (unsigned long long)t->mem_total,
       (unsigned long long)t->mem_used);
    jf(w, "\"computeTotal\":%.9g,\"computeAllocated\":%.9g,\"strandedCompute\":%.9g,",
       t->compute_total, t->compute_used, t->stranded);
    jf(w, "\"strandedMemoryBytes\":%llu,\"fragmentation\":%.9g,\"containers\":%llu",
       (unsigned long long)t->stranded_mem, sched_frag_ratio(t), (unsigned long long)t->containers);
}

static void verdict_write(struct jw *w, const struct sched_verdict *v)
{
    if (v == NULL) {
        jlit(w, "null");
        return;
    }
    jf(w, "{\"time\":%lld,\"offered\":%u,\"failed\":%u,\"node\":", (long long)v->time, v->offered,
       v->failed);
    if (v->node[0] != '\0')
        jstr(w, v->node);
    else
        jlit(w, "null");
    jlit(w, ",\"error\":");
    jstr(w, v->error);
    if (v->other_reasons > 0)
        jf(w, ",\"otherReasons\":%u", v->other_reasons);
    jlit(w, ",\"reasons\":[");
    for (unsigned r = 0; r < v->reason_count; r++) {
        const struct sched_verdict_reason *re = &v->reasons[r];
        jlit(w, r > 0 ? ",{\"reason\":" : "{\"reason\":");
        jstr(w, re->why);
        jf(w, ",\"nodes\":%u,\"examples\":[", re->count);
        for (unsigned k = 0; k < re->count && k < SCHED_VERDICT_EXAMPLES; k++) {
            if (k > 0)
                jlit(w, ",");
            jstr(w, re->nodes[k]);
        }
        jlit(w, "]}");
    }
    jlit(w, "]}");
}

/* The key's namespace and name as JSON members. */
static void key_write(struct jw *w, const char *key)
{
    const char *slash = strchr(key, '/');
    jlit(w, "\"namespace\":");
    jstr_n(w, key, slash != NULL ? (size_t)(slash - key) : 0);
    jlit(w, ",\"pod\":");
    jstr(w, slash != NULL ? slash + 1 : key);
}

struct share_list {
    struct sched_share_ref *refs;
    size_t n, cap;
};

static void share_collect(void *arg, const struct sched_share_ref *r)
{
    struct share_list *l = arg;
    xarray_grow(&l->refs, &l->cap, l->n + 1, sizeof *l->refs);
    l->refs[l->n++] = *r;
}

/* Orders shares by node and GPU (then pod key: the same order at every refresh). */
static int cmp_share(const void *a, const void *b)
{
    const struct sched_share_ref *x = a, *y = b;
    if (x->p->node != y->p->node)
        return x->p->node < y->p->node ? -1 : 1;
    if (x->g != y->g)
        return x->g < y->g ? -1 : 1;
    int c = strcmp(x->p->key, y->p->key);
    if (c != 0)
        return c;
    return x->k < y->k ? -1 : x->k > y->k;
}

/* What the node's inventory says of the time container `container` of pod uid was held
 * on GPU g (display only), NULL when it says nothing. */
static const struct annot_held *held_find(const struct sched_node *sn, const char *uid,
                                          const char *container, unsigned g)
{
    if (uid[0] == '\0')
        return NULL;
    for (unsigned k = 0; k < sn->held_count; k++) {
        const struct annot_held *h = &sn->held[k];
        if (h->gpu == g && strcmp(h->pod, uid) == 0 && strcmp(h->container, container) == 0)
            return h;
    }
    return NULL;
}

char *sched_view_state(const struct sched_state *s, int64_t now_unix)
{
    const struct place_cluster *c = s->cluster;
    struct share_list shares = {0};
    sched_each_share(s, share_collect, &shares);
    if (shares.n > 1) /* qsort takes no NULL, even for nothing */
        qsort(shares.refs, shares.n, sizeof *shares.refs, cmp_share);
    /* first[i * PLACE_MAX_GPUS + g]: where GPU g of node i starts in shares. */
    size_t slots = c->node_count * PLACE_MAX_GPUS;
    VG_AUTO_FREE size_t *first = xcalloc(slots + 1, sizeof *first);
    for (size_t k = 0, at = 0; at <= slots; at++) {
        while (k < shares.n &&
               (size_t)shares.refs[k].p->node * PLACE_MAX_GPUS + shares.refs[k].g < at)
            k++;
        first[at] = k;
    }
    VG_AUTO_FREE struct named_index *order = xcalloc(c->node_count + 1, sizeof *order);
    for (size_t i = 0; i < c->node_count; i++)
        order[i] = (struct named_index){c->nodes[i].name, i};
    qsort(order, c->node_count, sizeof *order, cmp_named);

    struct jw w = {0};
    vg_buf_init(&w.b, "dashboard state", (size_t)1 << 30);
    struct sched_totals all = {0};
    jf(&w, "{\"version\":1,\"time\":%lld,\"policy\":", (long long)now_unix);
    jstr(&w, place_policy_name(s->opt.policy));
    jlit(&w, ",\"nodes\":[");
    for (size_t k = 0; k < c->node_count; k++) {
        size_t i = order[k].index;
        const struct place_node *n = &c->nodes[i];
        const struct sched_node *sn = &s->nodes[i];
        struct sched_totals t = {0};
        sched_node_totals(s, i, &t);
        if (sn->present)
            sched_totals_add(&all, &t);
        jlit(&w, k > 0 ? ",{\"name\":" : "{\"name\":");
        jstr(&w, n->name);
        jf(&w, ",\"present\":%s,\"inventory\":%s,\"heartbeat\":%lld,\"totals\":{",
           sn->present ? "true" : "false", sn->has_inventory ? "true" : "false",
           (long long)sn->inventory.heartbeat);
        totals_write(&w, &t);
        jlit(&w, "},\"gpus\":[");
        for (unsigned g = 0; g < n->gpu_count; g++) {
            const struct place_gpu *gpu = &n->gpus[g];
            struct sched_gpu_view v;
            sched_gpu_view(s, i, g, &v);
            jf(&w, "%s{\"index\":%u,\"uuid\":", g > 0 ? "," : "", g);
            jstr(&w, gpu->uuid);
            jlit(&w, ",\"model\":");
            jstr(&w, gpu->model < c->model_count ? c->models[gpu->model] : "");
            jf(&w, ",\"memTotalBytes\":%llu,\"memAllocatedBytes\":%llu,\"computeAllocated\":%.9g",
               (unsigned long long)v.mem_total, (unsigned long long)v.mem_used, v.compute_used);
            jf(&w, ",\"containers\":%u,\"slots\":%u,\"healthy\":%s,\"blocked\":%s", gpu->tenants,
               gpu->slots, gpu->healthy ? "true" : "false", v.blocked ? "true" : "false");
            jf(&w, ",\"strandedCompute\":%.9g,\"strandedMemoryBytes\":%llu,\"tenants\":[",
               v.stranded_compute, (unsigned long long)v.stranded_mem);
            size_t from = first[i * PLACE_MAX_GPUS + g], to = first[i * PLACE_MAX_GPUS + g + 1];
            for (size_t r = from; r < to; r++) {
                const struct sched_share_ref *sr = &shares.refs[r];
                jlit(&w, r > from ? ",{" : "{");
                key_write(&w, sr->p->key);
                jlit(&w, ",\"container\":");
                jstr(&w, sr->name);
                jf(&w, ",\"state\":\"%s\",\"memBytes\":%llu,\"compute\":%.9g,\"highPriority\":%s",
                   sr->p->assumed ? "assumed" : "bound", (unsigned long long)(sr->mem_mib * MIB),
                   sr->cores / 100.0, sr->high ? "true" : "false");
                const struct annot_held *h = held_find(sn, sr->p->uid, sr->name, g);
                if (h != NULL)
                    jf(&w, ",\"heldSeconds\":%u", h->seconds);
                jlit(&w, "}");
            }
            jlit(&w, "]}");
        }
        jlit(&w, "]}");
    }
    free(shares.refs);
    jlit(&w, "],\"pending\":[");
    bool any = false;
    for (size_t i = sched_map_next(&s->pending, 0); i < s->pending.cap;
         i = sched_map_next(&s->pending, i + 1)) {
        const char *key = s->pending.slots[i].key;
        jlit(&w, any ? ",{" : "{");
        any = true;
        key_write(&w, key);
        jlit(&w, ",\"lastFilter\":");
        verdict_write(&w, sched_map_get(&s->verdicts, key));
        jlit(&w, "}");
    }
    struct sched_stats st;
    sched_state_stats(s, &st);
    jlit(&w, "],\"cluster\":{");
    totals_write(&w, &all);
    jf(&w, ",\"nodes\":%llu,\"podsBound\":%llu,\"podsAssumed\":%llu,\"podsPending\":%zu}}",
       (unsigned long long)st.nodes, (unsigned long long)st.bound, (unsigned long long)st.assumed,
       s->pending.count);
    char *out = NULL;
    if (w.rc < 0 || vg_buf_steal(&w.b, &out, NULL, &w.err) < 0) {
        vg_buf_free(&w.b);
        return NULL;
    }
    vg_buf_free(&w.b);
    return out;
}

char *sched_view_explain(const struct sched_state *s, const char *key)
{
    const struct sched_pod *p = sched_map_get(&s->pods, key);
    const struct sched_verdict *v = sched_map_get(&s->verdicts, key);
    bool pending = sched_map_get(&s->pending, key) != NULL;
    if (p == NULL && v == NULL && !pending)
        return NULL;
    const char *state = p != NULL ? (p->assumed ? "assumed" : "bound") : "pending";
    const char *slash = strchr(key, '/');
    VG_AUTO_JSON json_t *o = json_pack(
        "{s:s%, s:s, s:s, s:b}", "namespace", key, slash != NULL ? (size_t)(slash - key) : 0, "pod",
        slash != NULL ? slash + 1 : key, "state", state, "waiting", pending);
    json_object_set_new(
        o, "node", p != NULL && p->node_name[0] != '\0' ? json_string(p->node_name) : json_null());
    json_t *decision = p != NULL && p->decision != NULL ? json_loads(p->decision, 0, NULL) : NULL;
    json_object_set_new(o, "decision", decision != NULL ? decision : json_null());
    json_object_set_new(o, "blocking", json_boolean(p != NULL && p->blocking));
    json_object_set_new(o, "lastFilter", v != NULL ? verdict_json(v) : json_null());
    json_object_set_new(o, "policy", json_string(place_policy_name(s->opt.policy)));
    return json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
}

/* ---- /ui/explain's query --------------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A DNS-1123 name as Kubernetes allows for namespaces and pods. */
static bool k8s_name(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
              s[i] == '.'))
            return false;
    return true;
}

/* The percent-decoded value of [v, end) into out (size bytes); -EINVAL on a bad escape
 * or one that does not fit. */
static int decode_value(const char *v, const char *end, char *out, size_t size, size_t *len,
                        struct vg_err *err)
{
    size_t o = 0;
    while (v < end) {
        char c = *v++;
        if (c == '%') {
            int hi = end - v >= 2 ? hexval(v[0]) : -1, lo = end - v >= 2 ? hexval(v[1]) : -1;
            if (hi < 0 || lo < 0)
                return vg_err_set(err, -EINVAL, "vgpu: /ui/explain: a bad %%-escape in the query");
            c = (char)(hi * 16 + lo);
            v += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (o + 1 >= size)
            return vg_err_set(err, -EINVAL,
                              "vgpu: /ui/explain: pod and namespace must be Kubernetes names "
                              "(1 to 253 lowercase letters, digits, '-' and '.')");
        out[o++] = c;
    }
    out[o] = '\0';
    *len = o;
    return 0;
}

int sched_view_explain_key(const char *query, char *key, size_t size, struct vg_err *err)
{
    static const char names_msg[] = "vgpu: /ui/explain: pod and namespace must be Kubernetes "
                                    "names (1 to 253 lowercase letters, digits, '-' and '.')";
    if (query == NULL || query[0] == '\0')
        return vg_err_set(err, -EINVAL,
                          "vgpu: /ui/explain needs ?pod=NAME (and &namespace=NS, default "
                          "\"default\")");
    size_t qlen = strlen(query);
    if (qlen > SCHED_VIEW_QUERY_MAX)
        return vg_err_set(err, -EINVAL, "vgpu: /ui/explain: the query is over %d bytes",
                          SCHED_VIEW_QUERY_MAX);
    char pod[256] = "", ns[256] = "";
    size_t pod_len = 0, ns_len = 0;
    bool have_pod = false, have_ns = false;
    const char *p = query, *end = query + qlen;
    while (p <= end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp != NULL ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        if (eq == NULL)
            return vg_err_set(err, -EINVAL,
                              "vgpu: /ui/explain needs ?pod=NAME (and &namespace=NS, default "
                              "\"default\")");
        size_t klen = (size_t)(eq - p);
        bool is_pod = klen == 3 && memcmp(p, "pod", 3) == 0;
        bool is_ns = klen == 9 && memcmp(p, "namespace", 9) == 0;
        if (!is_pod && !is_ns) {
            char shown[65];
            size_t n = klen < 64 ? klen : 64;
            for (size_t i = 0; i < n; i++)
                shown[i] = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' ? p[i] : '?';
            shown[n] = '\0';
            return vg_err_set(err, -EINVAL,
                              "vgpu: /ui/explain: unknown parameter \"%s\" (pod and namespace "
                              "only)",
                              shown);
        }
        if ((is_pod && have_pod) || (is_ns && have_ns))
            return vg_err_set(err, -EINVAL, "vgpu: /ui/explain: %s given twice",
                              is_pod ? "pod" : "namespace");
        int rc = decode_value(eq + 1, stop, is_pod ? pod : ns, sizeof pod,
                              is_pod ? &pod_len : &ns_len, err);
        if (rc < 0)
            return rc;
        *(is_pod ? &have_pod : &have_ns) = true;
        if (amp == NULL)
            break;
        p = amp + 1;
    }
    if (!have_pod)
        return vg_err_set(err, -EINVAL,
                          "vgpu: /ui/explain needs ?pod=NAME (and &namespace=NS, default "
                          "\"default\")");
    if (!have_ns) {
        memcpy(ns, "default", 8);
        ns_len = 7;
    }
    if (!k8s_name(pod, pod_len) || !k8s_name(ns, ns_len))
        return vg_err_set(err, -EINVAL, "%s", names_msg);
    if (vg_snprintf(key, size, "%s/%s", ns, pod) < 0)
        return vg_err_set(err, -EINVAL, "%s", names_msg);
    return 0;
}
