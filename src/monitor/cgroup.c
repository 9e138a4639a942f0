/* cgroup path → pod UID and container ID (monitor.h; layouts in docs/monitor.md).
 *
 * kubelet's hierarchy starts at a component named `kubepods` (cgroupfs driver) or
 * `kubepods.slice` / `<prefix>-kubepods.slice` (systemd driver; kind and friends nest it
 * as `kubelet-kubepods.slice`). Below it: an optional QoS level, the pod, the container:
 *
 *   cgroupfs  kubepods[/burstable|/besteffort]/pod<uid>/<ctr>
 *   systemd   kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid_>.slice/<ctr>
 *
 * where <uid_> is the UID with '_' for '-' and <ctr> is the container ID (64 lower-case
 * hex digits), bare or as `cri-containerd-<id>`, `crio-<id>` or `docker-<id>`, with
 * `.scope` after a prefixed one. The same paths appear on cgroup v1 and v2. */
#include <errno.h>
#include <string.h>

#include "monitor/monitor.h"

/* One path component: [p, p + n). */
struct comp {
    const char *p;
    size_t n;
};

static bool comp_is(struct comp c, const char *s)
{
    return c.n == strlen(s) && memcmp(c.p, s, c.n) == 0;
}

static bool has_prefix(struct comp c, const char *s)
{
    size_t n = strlen(s);
    return c.n >= n && memcmp(c.p, s, n) == 0;
}

static bool has_suffix(struct comp c, const char *s)
{
    size_t n = strlen(s);
    return c.n >= n && memcmp(c.p + c.n - n, s, n) == 0;
}

static bool is_hex(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
}

/* A Kubernetes UID (RFC 4122 form, lower case) with `sep` between its groups, into out
 * in the dashed form. */
static bool parse_uid(const char *p, size_t n, char sep, char out[MON_UID_MAX])
{
    if (n != 36)
        return false;
    for (size_t i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? p[i] != sep : !is_hex(p[i]))
            return false;
        out[i] = dash ? '-' : p[i];
    }
    out[36] = '\0';
    return true;
}

/* Splits path[0..len) into components (empty ones, from "//", are refused). */
static int split(const char *path, size_t len, struct comp *comps, size_t max, size_t *count,
                 struct vg_err *err)
{
    size_t n = 0, i = 1;
    if (len == 0 || path[0] != '/')
        return vg_err_set(err, -EINVAL, "cgroup path does not start with '/'");
    if (len == 1) {
        *count = 0;
        return 0;
    }
    while (i <= len) {
        const char *slash = memchr(path + i, '/', len - i);
        size_t end = slash ? (size_t)(slash - path) : len;
        if (end == i)
            return vg_err_set(err, -EINVAL, "cgroup path has an empty component");
        if (n == max)
            return vg_err_set(err, -EINVAL, "cgroup path has more than %zu components", max);
        comps[n++] = (struct comp){path + i, end - i};
        i = end + 1;
    }
    *count = n;
    return 0;
}

/* The container component: 0 with the ID, -EINVAL when it is not one. */
static int parse_container(struct comp c, char out[MON_CID_MAX])
{
    static const char *const prefixes[] = {"cri-containerd-", "crio-", "docker-"};
    struct comp id = c;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        if (has_prefix(c, prefixes[i])) {
            size_t pl = strlen(prefixes[i]);
            id = (struct comp){c.p + pl, c.n - pl};
            if (has_suffix(id, ".scope"))
                id.n -= strlen(".scope");
            break;
        }
    }
    if (id.n != 64)
        return -EINVAL;
    for (size_t i = 0; i < 64; i++)
        if (!is_hex(id.p[i]))
            return -EINVAL;
    memcpy(out, id.p, 64);
    out[64] = '\0';
    return 0;
}

int mon_cgroup_parse_path(const char *path, size_t len, const char *root, struct mon_cgroup_id *out,
                          struct vg_err *err)
{
    if (len >= MON_PATH_MAX)
        return vg_err_set(err, -EINVAL, "cgroup path longer than %d bytes", MON_PATH_MAX - 1);
    if (memchr(path, '\0', len) || memchr(path, '\n', len))
        return vg_err_set(err, -EINVAL, "cgroup path holds a NUL or newline");
    size_t skip = 0;
    if (root && root[0] && strcmp(root, "/") != 0) {
        size_t rl = strlen(root);
        while (rl > 1 && root[rl - 1] == '/')
            rl--;
        if (len < rl || memcmp(path, root, rl) != 0 || (len > rl && path[rl] != '/'))
            return vg_err_set(err, -ENOENT, "cgroup path is not under %s", root);
        skip = rl;
        if (skip == len)
            return vg_err_set(err, -ENOENT, "cgroup path is the cgroup root");
    }
    struct comp comps[MON_PATH_MAX / 2];
    size_t n = 0;
    int rc = split(path + skip, len - skip, comps, sizeof comps / sizeof comps[0], &n, err);
    if (rc < 0)
        return rc;
    /* With a root, kubelet's hierarchy is its first component; without, the first
     * component that looks like it. */
    size_t k = 0;
    for (; k < n; k++) {
        struct comp c = comps[k];
        if (comp_is(c, "kubepods") || comp_is(c, "kubepods.slice") ||
            (has_suffix(c, "-kubepods.slice") && !has_prefix(c, "kubepods-")))
            break;
        if (skip)
            k = n - 1;
    }
    if (k >= n)
        return vg_err_set(err, -ENOENT, "cgroup path is not in kubelet's hierarchy");
    struct comp top = comps[k++];
    bool systemd = has_suffix(top, ".slice");
    /* systemd: every level below is named after the top's stem ("kubepods",
     * "kubelet-kubepods"). */
    size_t stem = systemd ? top.n - strlen(".slice") : 0;
    if (k < n) {
        struct comp c = comps[k];
        static const char *const qos[] = {"burstable", "besteffort"};
        for (size_t q = 0; q < 2; q++) {
            bool match;
            if (systemd)
                match = c.n == stem + 1 + strlen(qos[q]) + strlen(".slice") &&
                        memcmp(c.p, top.p, stem) == 0 && c.p[stem] == '-' &&
                        memcmp(c.p + stem + 1, qos[q], strlen(qos[q])) == 0 &&
                        has_suffix(c, ".slice");
            else
                match = comp_is(c, qos[q]);
            if (match) {
                k++;
                break;
            }
        }
    }
    if (k >= n)
        return vg_err_set(err, -ENOENT, "cgroup path is above the pods");
    struct comp pod = comps[k++];
    memset(out, 0, sizeof *out);
    if (systemd) {
        /* <stem>[-<qos>]-pod<uid_>.slice: the UID is the 36 bytes before ".slice". */
        size_t tail = strlen("-pod") + 36 + strlen(".slice");
        if (pod.n < stem + tail || memcmp(pod.p, top.p, stem) != 0 || !has_suffix(pod, ".slice") ||
            memcmp(pod.p + pod.n - tail, "-pod", 4) != 0 ||
            !parse_uid(pod.p + pod.n - 36 - strlen(".slice"), 36, '_', out->pod_uid))
            return vg_err_set(err, -EINVAL, "cgroup path: '%.*s' is not a pod slice", (int)pod.n,
                              pod.p);
        /* Between the stem and "-pod": nothing, or the QoS class. */
        struct comp mid = {pod.p + stem, pod.n - stem - tail};
        if (mid.n != 0 && !comp_is(mid, "-burstable") && !comp_is(mid, "-besteffort"))
            return vg_err_set(err, -EINVAL, "cgroup path: '%.*s' is not a pod slice", (int)pod.n,
                              pod.p);
    } else if (!has_prefix(pod, "pod") || !parse_uid(pod.p + 3, pod.n - 3, '-', out->pod_uid)) {
        return vg_err_set(err, -EINVAL, "cgroup path: '%.*s' is not a pod", (int)pod.n, pod.p);
    }
    if (k < n && parse_container(comps[k], out->container_id) != 0)
        return vg_err_set(err, -EINVAL, "cgroup path: '%.*s' is not a container", (int)comps[k].n,
                          comps[k].p);
    return 0;
}

/* One line of /proc/<pid>/cgroup: its path and how much it is preferred (0 best). */
struct line {
    const char *path;
    size_t len;
    int rank;
};

#define MON_CGROUP_LINES 64 /* hierarchies in one file (v1 has about 13) */

int mon_cgroup_parse(const char *text, size_t len, const char *root, struct mon_cgroup_id *out,
                     struct vg_err *err)
{
    if (len > MON_CGROUP_MAX)
        return vg_err_set(err, -EINVAL, "cgroup file longer than %d bytes", MON_CGROUP_MAX);
    struct line lines[MON_CGROUP_LINES];
    size_t n = 0, pos = 0;
    while (pos < len) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - line) : len - pos;
        pos += ll + (nl ? 1 : 0);
        if (ll == 0)
            continue;
        /* ID:CONTROLLERS:PATH; the path may itself hold ':'. */
        const char *c1 = memchr(line, ':', ll);
        const char *c2 = c1 ? memchr(c1 + 1, ':', ll - (size_t)(c1 + 1 - line)) : NULL;
        if (!c1 || !c2 || c1 == line)
            return vg_err_set(err, -EINVAL, "cgroup file: line '%.*s' is not ID:CONTROLLERS:PATH",
                              (int)(ll > 80 ? 80 : ll), line);
        for (const char *d = line; d < c1; d++)
            if (*d < '0' || *d > '9')
                return vg_err_set(err, -EINVAL, "cgroup file: hierarchy ID '%.*s' is not a number",
                                  (int)(c1 - line), line);
        if (n == MON_CGROUP_LINES)
            return vg_err_set(err, -EINVAL, "cgroup file: more than %d lines", MON_CGROUP_LINES);
        struct comp ctl = {c1 + 1, (size_t)(c2 - c1 - 1)};
        int rank = 2;
        if (ctl.n == 0 && c1 - line == 1 && line[0] == '0')
            rank = 0;
        for (size_t i = 0; rank == 2 && i < ctl.n;) {
            const char *comma = memchr(ctl.p + i, ',', ctl.n - i);
            size_t end = comma ? (size_t)(comma - ctl.p) : ctl.n;
            if (comp_is((struct comp){ctl.p + i, end - i}, "memory"))
                rank = 1;
            i = end + 1;
        }
        lines[n++] = (struct line){c2 + 1, ll - (size_t)(c2 + 1 - line), rank};
    }
    /* Best rank first, file order within a rank. Messages are formatted only for the
     * error returned (this runs for every GPU process in every sample). */
    int first_error = 0;
    size_t bad = 0;
    for (int rank = 0; rank <= 2; rank++) {
        for (size_t i = 0; i < n; i++) {
            if (lines[i].rank != rank)
                continue;
            int rc = mon_cgroup_parse_path(lines[i].path, lines[i].len, root, out, NULL);
            if (rc == 0)
                return 0;
            if (rc != -ENOENT && first_error == 0) {
                first_error = rc;
                bad = i;
            }
        }
    }
    if (first_error)
        return mon_cgroup_parse_path(lines[bad].path, lines[bad].len, root, out, err);
    return vg_err_set(err, -ENOENT, "no cgroup of the process is in a pod");
}
