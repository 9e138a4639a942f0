/* The prepared claims, kept in <state-dir>/checkpoint.json so that a restarted plugin
 * answers a repeated NodePrepareResources with what it prepared before and removes exactly
 * that on NodeUnprepareResources (docs/dra.md, "Checkpoint"):
 *
 *   {"version": 1, "bootID": "<node boot id>",
 *    "claims": [{"uid", "namespace", "name",
 *                "groups": [{"name", "gpus": [{"uuid", "memoryMiB", "cores"}]}],
 *                "devices": [{"request", "pool", "device", "shareID", "cdiID"}]}]}
 *
 * Everything read back is checked as strictly as a claim from the API: the names reach
 * paths. */
#define _GNU_SOURCE /* renameat2 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/buf.h"
#include "base/fs.h"
#include "base/auto_json.h"
#include "base/mem.h"
#include "base/str.h"
#include "dra/dra.h"

static void record_free(struct dra_prepared *r);

void dra_checkpoint_release(struct dra_checkpoint *cp)
{
    for (size_t i = 0; i < cp->count; i++) {
        free(cp->texts[i]);
        record_free(cp->claims[i]);
    }
    free(cp->texts);
    free(cp->claims);
    memset(cp, 0, sizeof(*cp));
}

void dra_prepared_copy(struct dra_prepared *dst, const struct dra_prepared *src)
{
    memcpy(dst->uid, src->uid, sizeof dst->uid);
    memcpy(dst->ns, src->ns, sizeof dst->ns);
    memcpy(dst->name, src->name, sizeof dst->name);
    dst->group_count = src->group_count;
    memcpy(dst->groups, src->groups, src->group_count * sizeof(src->groups[0]));
    dst->device_count = src->device_count;
    memcpy(dst->devices, src->devices, src->device_count * sizeof(src->devices[0]));
}

/* A record of its own, in pages of its own: most of a record is room for 32 requests
 * (about 75 KiB), and only the pages of the groups and devices used are ever written, so
 * a claim of one request costs three pages of memory, not 19. The heap would hand out
 * memory earlier calls wrote, which calloc clears, touching every page. */
static struct dra_prepared *record(const struct dra_prepared *p)
{
    void *m = mmap(NULL, sizeof(struct dra_prepared), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "vgpu: out of memory (checkpoint record)\n");
        abort();
    }
    struct dra_prepared *r = m;
    dra_prepared_copy(r, p);
    return r;
}

static void record_free(struct dra_prepared *r)
{
    if (r != NULL)
        munmap(r, sizeof(*r));
}

static size_t index_of(const struct dra_checkpoint *cp, const char *uid)
{
    for (size_t i = 0; i < cp->count; i++)
        if (strcmp(cp->claims[i]->uid, uid) == 0)
            return i;
    return cp->count;
}

struct dra_prepared *dra_checkpoint_find(struct dra_checkpoint *cp, const char *uid)
{
    size_t i = index_of(cp, uid);
    return i < cp->count ? cp->claims[i] : NULL;
}

void dra_checkpoint_put(struct dra_checkpoint *cp, const struct dra_prepared *p)
{
    size_t i = index_of(cp, p->uid);
    if (i < cp->count) {
        struct dra_prepared *r = record(p);
        record_free(cp->claims[i]);
        cp->claims[i] = r;
        free(cp->texts[i]);
        cp->texts[i] = NULL;
        return;
    }
    size_t claims_cap = cp->cap; /* both arrays grow alike from the same cap */
    xarray_grow(&cp->claims, &claims_cap, cp->count + 1, sizeof(*cp->claims));
    xarray_grow(&cp->texts, &cp->cap, cp->count + 1, sizeof(*cp->texts));
    cp->texts[cp->count] = NULL;
    cp->claims[cp->count++] = record(p);
}

void dra_checkpoint_remove(struct dra_checkpoint *cp, const char *uid)
{
    size_t i = index_of(cp, uid);
    if (i == cp->count)
        return;
    free(cp->texts[i]);
    record_free(cp->claims[i]);
    memmove(&cp->claims[i], &cp->claims[i + 1], (cp->count - i - 1) * sizeof(*cp->claims));
    memmove(&cp->texts[i], &cp->texts[i + 1], (cp->count - i - 1) * sizeof(*cp->texts));
    cp->count--;
}

/* One claim's JSON (compact, keys sorted), malloc'ed. */
static char *encode_claim(const struct dra_prepared *p)
{
    json_t *groups = json_array(), *devices = json_array();
    for (unsigned g = 0; g < p->group_count; g++) {
        const struct dra_group *gr = &p->groups[g];
        json_t *gpus = json_array();
        for (unsigned k = 0; k < gr->container.gpu_count; k++) {
            const struct annot_share *s = &gr->container.gpus[k];
            json_array_append_new(gpus, json_pack("{s:s, s:I, s:I}", "uuid", s->uuid, "memoryMiB",
                                                  (json_int_t)s->memory_mib, "cores",
                                                  (json_int_t)s->cores));
        }
        json_array_append_new(groups, json_pack("{s:s, s:o}", "name", gr->name, "gpus", gpus));
    }
    for (unsigned d = 0; d < p->device_count; d++) {
        const struct dra_device *dv = &p->devices[d];
        json_array_append_new(devices,
                              json_pack("{s:s, s:s, s:s, s:s, s:s}", "request", dv->request, "pool",
                                        dv->pool, "device", dv->device, "shareID", dv->share_id,
                                        "cdiID", dv->cdi_id));
    }
    VG_AUTO_JSON json_t *claim =
        json_pack("{s:s, s:s, s:s, s:o, s:o}", "uid", p->uid, "namespace", p->ns, "name", p->name,
                  "groups", groups, "devices", devices);
    return claim ? json_dumps(claim, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
}

char *dra_checkpoint_encode(const struct dra_checkpoint *cp)
{
    VG_AUTO_JSON json_t *boot = json_string(cp->boot_id);
    VG_AUTO_FREE char *boot_text = boot ? json_dumps(boot, JSON_ENCODE_ANY) : NULL;
    if (boot_text == NULL)
        return NULL;
    size_t len = strlen(boot_text) + 64;
    for (size_t i = 0; i < cp->count; i++) {
        if (cp->texts[i] == NULL && (cp->texts[i] = encode_claim(cp->claims[i])) == NULL)
            return NULL;
        len += strlen(cp->texts[i]) + 1;
    }
    /* {"bootID":...,"claims":[...],"version":1}: the keys sorted, as before */
    char *out = xmalloc(len);
    size_t at = 0;
    at += (size_t)vg_snprintf(out, len, "{\"bootID\":%s,\"claims\":[", boot_text);
    for (size_t i = 0; i < cp->count; i++) {
        size_t n = strlen(cp->texts[i]);
        if (i > 0)
            out[at++] = ',';
        memcpy(out + at, cp->texts[i], n);
        at += n;
    }
    vg_snprintf(out + at, len - at, "],\"version\":1}");
    return out;
}

/* Copies a string member into dst[size], checked by valid (may be NULL). */
static int take(json_t *obj, const char *key, bool (*valid)(const char *), bool empty_ok, char *dst,
                size_t size, const char *what, struct vg_err *err)
{
    const char *s = json_string_value(json_object_get(obj, key));
    if (s == NULL || (!empty_ok && s[0] == '\0') || (s[0] != '\0' && valid && !valid(s)) ||
        vg_strlcpy(dst, s, size) < 0)
        return vg_err_set(err, -EINVAL, "checkpoint: %s.%s missing or malformed", what, key);
    return 0;
}

static bool uuid_name(const char *s)
{
    return s[0] != '.' && strchr(s, '/') == NULL;
}

static bool request_or_label(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!slash)
        return annot_dns_label(s);
    char first[DRA_REQUEST_MAX];
    if ((size_t)(slash - s) >= sizeof(first))
        return false;
    memcpy(first, s, (size_t)(slash - s));
    first[slash - s] = '\0';
    return annot_dns_label(first) && annot_dns_label(slash + 1);
}

static bool cdi_name(const char *s)
{
    return strncmp(s, DRA_CDI_KIND "=", strlen(DRA_CDI_KIND) + 1) == 0;
}

static bool any(const char *s)
{
    (void)s;
    return true;
}

static int decode_claim(json_t *c, struct dra_prepared *p, struct vg_err *err)
{
    memset(p, 0, sizeof(*p));
    if (!json_is_object(c))
        return vg_err_set(err, -EINVAL, "checkpoint: a claim is not an object");
    int rc;
    if ((rc = take(c, "uid", annot_pod_uid, false, p->uid, sizeof p->uid, "claim", err)) < 0 ||
        (rc = take(c, "namespace", annot_dns_label, false, p->ns, sizeof p->ns, "claim", err)) <
            0 ||
        (rc = take(c, "name", annot_dns_subdomain, false, p->name, sizeof p->name, "claim", err)) <
            0)
        return rc;
    json_t *groups = json_object_get(c, "groups"), *devices = json_object_get(c, "devices");
    if (!json_is_array(groups) || json_array_size(groups) > DRA_MAX_RESULTS ||
        !json_is_array(devices) || json_array_size(devices) > DRA_MAX_RESULTS)
        return vg_err_set(err, -EINVAL, "checkpoint: claim %s: groups or devices malformed",
                          p->uid);
    size_t i;
    json_t *g;
    json_array_foreach(groups, i, g)
    {
        struct dra_group *gr = &p->groups[p->group_count];
        if ((rc = take(g, "name", annot_dns_label, false, gr->name, sizeof gr->name, "group",
                       err)) < 0)
            return rc;
        vg_strlcpy(gr->container.name, gr->name, sizeof gr->container.name);
        json_t *gpus = json_object_get(g, "gpus");
        if (!json_is_array(gpus) || json_array_size(gpus) == 0 ||
            json_array_size(gpus) > ANNOT_MAX_GPUS)
            return vg_err_set(err, -EINVAL, "checkpoint: group %s: gpus malformed", gr->name);
        size_t k;
        json_t *s;
        json_array_foreach(gpus, k, s)
        {
            struct annot_share *sh = &gr->container.gpus[gr->container.gpu_count];
            json_t *mem = json_object_get(s, "memoryMiB"), *cores = json_object_get(s, "cores");
            if ((rc = take(s, "uuid", uuid_name, false, sh->uuid, sizeof sh->uuid, "gpu", err)) < 0)
                return rc;
            if (!json_is_integer(mem) || json_integer_value(mem) < 0 || !json_is_integer(cores) ||
                json_integer_value(cores) < 0 || json_integer_value(cores) > 100)
                return vg_err_set(err, -EINVAL, "checkpoint: gpu %s: memoryMiB or cores malformed",
                                  sh->uuid);
            sh->memory_mib = (uint64_t)json_integer_value(mem);
            sh->cores = (unsigned)json_integer_value(cores);
            gr->container.gpu_count++;
        }
        p->group_count++;
    }
    json_t *d;
    json_array_foreach(devices, i, d)
    {
        struct dra_device *dv = &p->devices[p->device_count];
        if ((rc = take(d, "request", request_or_label, false, dv->request, sizeof dv->request,
                       "device", err)) < 0 ||
            (rc = take(d, "pool", any, false, dv->pool, sizeof dv->pool, "device", err)) < 0 ||
            (rc = take(d, "device", annot_dns_label, false, dv->device, sizeof dv->device, "device",
                       err)) < 0 ||
            (rc = take(d, "shareID", annot_pod_uid, true, dv->share_id, sizeof dv->share_id,
                       "device", err)) < 0 ||
            (rc = take(d, "cdiID", cdi_name, false, dv->cdi_id, sizeof dv->cdi_id, "device", err)) <
                0)
            return rc;
        p->device_count++;
    }
    return 0;
}

int dra_checkpoint_decode(const char *text, size_t len, struct dra_checkpoint *out,
                          struct vg_err *err)
{
    memset(out, 0, sizeof(*out));
    if (len > DRA_CHECKPOINT_MAX_BYTES)
        return vg_err_set(err, -EMSGSIZE, "checkpoint larger than %u bytes",
                          DRA_CHECKPOINT_MAX_BYTES);
    json_error_t jerr;
    VG_AUTO_JSON json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return vg_err_set(err, -EINVAL, "checkpoint is not JSON: %s (line %d)", jerr.text,
                          jerr.line);
    json_t *version = json_object_get(root, "version"), *claims = json_object_get(root, "claims");
    if (!json_is_integer(version) || json_integer_value(version) != 1)
        return vg_err_set(err, -EINVAL, "checkpoint: version is not 1");
    const char *boot = json_string_value(json_object_get(root, "bootID"));
    if (boot == NULL || vg_strlcpy(out->boot_id, boot, sizeof out->boot_id) < 0)
        return vg_err_set(err, -EINVAL, "checkpoint: bootID missing or malformed");
    if (!json_is_array(claims))
        return vg_err_set(err, -EINVAL, "checkpoint: claims is not a list");
    size_t i;
    json_t *c;
    json_array_foreach(claims, i, c)
    {
        struct dra_prepared p;
        if (decode_claim(c, &p, err) < 0) {
            dra_checkpoint_release(out);
            return err->code;
        }
        if (dra_checkpoint_find(out, p.uid)) {
            dra_checkpoint_release(out);
            return vg_err_set(err, -EINVAL, "checkpoint: claim %s listed twice", p.uid);
        }
        dra_checkpoint_put(out, &p);
    }
    return 0;
}

int dra_checkpoint_load(const char *path, struct dra_checkpoint *out, struct vg_err *err)
{
    memset(out, 0, sizeof(*out));
    VG_AUTO_CLOSE int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return vg_err_errno(err, errno, "opening %s", path);
    }
    VG_AUTO_FREE char *buf = NULL;
    size_t len = 0;
    int rc = vg_read_fd(fd, path, DRA_CHECKPOINT_MAX_BYTES, &buf, &len, err);
    if (rc < 0)
        return rc;
    if (dra_checkpoint_decode(buf, len, out, err) < 0)
        return vg_err_wrap(err, "%s", path);
    return 0;
}

int dra_checkpoint_save(const char *path, const struct dra_checkpoint *cp, struct vg_err *err)
{
    VG_AUTO_FREE char *text = dra_checkpoint_encode(cp);
    if (text == NULL)
        return vg_err_set(err, -ENOMEM, "encoding the checkpoint");
    /* Synced, and swapped with the previous checkpoint rather than renamed over it: the
     * old inode becomes path.tmp, the next save's file, so no inode is freed per save
     * (ext4 skips recently freed inodes, which made every claim's file creation slower
     * with each save). */
    return vg_write_file_atomic(path, text, strlen(text), 0600, VG_WRITE_SYNC | VG_WRITE_SWAP, err);
}

int dra_boot_id(const char *path, char *out, size_t size, struct vg_err *err)
{
    if (path == NULL)
        path = DRA_BOOT_ID_PATH;
    VG_AUTO_FILE FILE *f = fopen(path, "re");
    if (f == NULL)
        return vg_err_errno(err, errno, "opening %s", path);
    if (fgets(out, (int)size, f) == NULL)
        return vg_err_set(err, -EINVAL, "%s is empty", path);
    out[strcspn(out, "\r\n")] = '\0';
    if (out[0] == '\0')
        return vg_err_set(err, -EINVAL, "%s is empty", path);
    return 0;
}
