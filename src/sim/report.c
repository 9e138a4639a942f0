/* Results: statistics over seeds, the JSON object of docs/placement.md, and the
 * self-contained HTML report (inline SVG drawn here, no scripts, viewable offline).
 *
 * Numbers are printed with fixed precision so that equal runs give byte-identical
 * output; only `seconds` varies between invocations. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/auto.h"
#include "base/mem.h"
#include "sim/sim.h"

void sim_stats(const double *v, size_t n, struct sim_stats *out)
{
    memset(out, 0, sizeof *out);
    if (n == 0)
        return;
    double sum = 0;
    out->min = out->max = v[0];
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
        out->min = v[i] < out->min ? v[i] : out->min;
        out->max = v[i] > out->max ? v[i] : out->max;
    }
    out->mean = sum / (double)n;
    double sq = 0;
    for (size_t i = 0; i < n; i++)
        sq += (v[i] - out->mean) * (v[i] - out->mean);
    out->sd = n > 1 ? sqrt(sq / (double)(n - 1)) : 0; /* sample SD, as pandas */
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_stats(FILE *f, const char *key, const double *v, size_t n)
{
    struct sim_stats s;
    sim_stats(v, n, &s);
    fputc(',', f);
    json_string(f, key);
    fprintf(f, ":{\"mean\":%.4f,\"sd\":%.4f,\"min\":%.4f,\"max\":%.4f}", s.mean, s.sd, s.min,
            s.max);
}

int sim_write_json(FILE *f, const struct sim_trace *t, const struct sim_run_result *runs, size_t n,
                   double seconds)
{
    double *v = xcalloc(n > 0 ? n : 1, sizeof *v);
    fputs("{\"policy\":", f);
    json_string(f, n > 0 ? place_policy_name(runs[0].policy) : "");
    fputs(",\"workload\":", f);
    json_string(f, t->workload);
    fprintf(f, ",\"nodes\":%zu,\"gpus\":%llu,\"pods\":%zu,\"seeds\":[", t->cluster->node_count,
            (unsigned long long)t->cluster->gpu_count, t->pod_count);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)runs[i].seed);
    fputc(']', f);
    for (size_t i = 0; i < n; i++)
        v[i] = runs[i].unallocated_pct_100;
    json_stats(f, "unallocated_gpu_pct_at_arrival_100", v, n);
    for (size_t i = 0; i < n; i++)
        v[i] = runs[i].unallocated_pct_100 * (double)t->cluster->gpu_count / 100.0;
    json_stats(f, "unallocated_gpus_at_arrival_100", v, n);
    for (size_t i = 0; i < n; i++)
        v[i] = runs[i].alloc_pct_130;
    json_stats(f, "allocation_pct_at_arrival_130", v, n);
    for (size_t i = 0; i < n; i++)
        v[i] = runs[i].frag_pct[80];
    json_stats(f, "frag_pct_at_arrival_80", v, n);
    for (size_t i = 0; i < n; i++)
        v[i] = runs[i].frag_rate_pct[90];
    json_stats(f, "frag_rate_pct_at_arrival_90", v, n);
    for (size_t i = 0; i < n; i++)
        v[i] = (double)runs[i].failed_pods;
    json_stats(f, "failed_pods", v, n);
    /* Rejected pods up to 100 % arrival by shape: mean count and mean GPUs over seeds. */
    fputs(",\"failed_at_arrival_100_by_shape\":{", f);
    for (int k = 0; k < SIM_SHAPE_COUNT; k++) {
        double pods = 0, gpus = 0;
        for (size_t i = 0; i < n; i++) {
            pods += (double)runs[i].failed_100[k];
            gpus += (double)runs[i].failed_100_milli[k] / PLACE_GPU_MILLI;
        }
        fprintf(f, "%s\"%s\":{\"pods\":%.1f,\"gpus\":%.2f}", k ? "," : "",
                sim_shape_name((enum sim_shape)k), n > 0 ? pods / (double)n : 0,
                n > 0 ? gpus / (double)n : 0);
    }
    fputc('}', f);
    if (n > 0 && runs[0].high_pods > 0) {
        /* Task priority (--priority-high): the share of high-priority pods that had to share
         * a GPU with another one. */
        for (size_t i = 0; i < n; i++)
            v[i] = 100.0 * (double)runs[i].high_shared /
                   (double)(runs[i].high_pods > 0 ? runs[i].high_pods : 1);
        json_stats(f, "high_priority_pods_sharing_pct", v, n);
    }
    fputs(",\"runs\":[", f);
    for (size_t i = 0; i < n; i++)
        fprintf(f,
                "%s{\"seed\":%llu,\"pods\":%llu,\"failed_pods\":%llu,"
                "\"unallocated_gpu_pct_at_arrival_100\":%.4f,"
                "\"allocation_pct_at_arrival_130\":%.4f}",
                i ? "," : "", (unsigned long long)runs[i].seed, (unsigned long long)runs[i].pods,
                (unsigned long long)runs[i].failed_pods, runs[i].unallocated_pct_100,
                runs[i].alloc_pct_130);
    fputc(']', f);
    if (seconds >= 0)
        fprintf(f, ",\"seconds\":%.3f", seconds);
    fputs("}\n", f);
    free(v);
    return ferror(f) ? -EIO : 0;
}

/* ---- HTML ---------------------------------------------------------------------------- */

static const char *const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                     "#8c564b", "#e377c2", "#7f7f7f", "#17becf"};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Linear-interpolated percentile of sorted values. */
static double percentile(const double *sorted, size_t n, double q)
{
    if (n == 1)
        return sorted[0];
    double pos = q * (double)(n - 1);
    size_t i = (size_t)pos;
    if (i + 1 >= n)
        return sorted[n - 1];
    return sorted[i] + (pos - (double)i) * (sorted[i + 1] - sorted[i]);
}

enum curve { CURVE_ALLOC, CURVE_FRAG, CURVE_RATE };

static double curve_value(const struct sim_run_result *r, enum curve which, int x)
{
    switch (which) {
    case CURVE_ALLOC:
        return r->alloc_pct[x];
    case CURVE_FRAG:
        return r->frag_pct[x];
    case CURVE_RATE:
        break;
    }
    return r->frag_rate_pct[x];
}

/* One chart: median line and 25-75 % band per policy over arrival 0..130 %. */
static void svg_chart(FILE *f, const char *title, const char *ylabel, enum curve which, double ymax,
                      const struct sim_run_result *results, size_t policies, size_t seeds)
{
    const double w = 720, h = 400, left = 60, right = 150, top = 30, bottom = 45;
    const double pw = w - left - right, ph = h - top - bottom;
    fprintf(f,
            "<h2>%s</h2>\n<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' "
            "height='%.0f' font-family='sans-serif' font-size='12'>\n",
            title, w, h);
    fprintf(f,
            "<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' fill='none' "
            "stroke='#444'/>\n",
            left, top, pw, ph);
    for (int x = 0; x <= 130; x += 10) {
        double px = left + pw * x / 130.0;
        fprintf(f,
                "<line x1='%.1f' y1='%.0f' x2='%.1f' y2='%.0f' stroke='#ddd'/>"
                "<text x='%.1f' y='%.0f' text-anchor='middle'>%d</text>\n",
                px, top, px, top + ph, px, top + ph + 15, x);
    }
    for (int i = 0; i <= 5; i++) {
        double v = ymax * i / 5.0, py = top + ph - ph * i / 5.0;
        fprintf(f,
                "<line x1='%.0f' y1='%.1f' x2='%.0f' y2='%.1f' stroke='#ddd'/>"
                "<text x='%.0f' y='%.1f' text-anchor='end'>%.0f</text>\n",
                left, py, left + pw, py, left - 5, py + 4, v);
    }
    fprintf(f,
            "<text x='%.0f' y='%.0f' text-anchor='middle'>arrived workload (%% of cluster "
            "GPU capacity)</text>\n",
            left + pw / 2, h - 8);
    fprintf(f, "<text transform='translate(14,%.0f) rotate(-90)' text-anchor='middle'>%s</text>\n",
            top + ph / 2, ylabel);
    double *vals = xmalloc(seeds * sizeof *vals);
    for (size_t p = 0; p < policies; p++) {
        const struct sim_run_result *runs = &results[p * seeds];
        const char *color = colors[p % (sizeof colors / sizeof colors[0])];
        double lo[SIM_CURVE_POINTS], mid[SIM_CURVE_POINTS], hi[SIM_CURVE_POINTS];
        for (int x = 0; x < SIM_CURVE_POINTS; x++) {
            for (size_t s = 0; s < seeds; s++)
                vals[s] = curve_value(&runs[s], which, x);
            qsort(vals, seeds, sizeof *vals, cmp_double);
            lo[x] = percentile(vals, seeds, 0.25);
            mid[x] = percentile(vals, seeds, 0.5);
            hi[x] = percentile(vals, seeds, 0.75);
        }
#define PX(x) (left + pw * (x) / 130.0)
#define PY(v) (top + ph - ph * ((v) > ymax ? ymax : (v) < 0 ? 0 : (v)) / ymax)
        fprintf(f, "<polygon fill='%s' fill-opacity='0.2' stroke='none' points='", color);
        for (int x = 0; x < SIM_CURVE_POINTS; x++)
            fprintf(f, "%.1f,%.1f ", PX(x), PY(hi[x]));
        for (int x = SIM_CURVE_POINTS - 1; x >= 0; x--)
            fprintf(f, "%.1f,%.1f ", PX(x), PY(lo[x]));
        fprintf(f, "'/>\n<polyline fill='none' stroke='%s' stroke-width='1.5' points='", color);
        for (int x = 0; x < SIM_CURVE_POINTS; x++)
            fprintf(f, "%.1f,%.1f ", PX(x), PY(mid[x]));
        fputs("'/>\n", f);
#undef PX
#undef PY
        double ly = top + 15 + 18.0 * (double)p;
        fprintf(f,
                "<line x1='%.0f' y1='%.1f' x2='%.0f' y2='%.1f' stroke='%s' "
                "stroke-width='3'/><text x='%.0f' y='%.1f'>%s</text>\n",
                left + pw + 10, ly, left + pw + 30, ly, color, left + pw + 35, ly + 4,
                place_policy_name(runs[0].policy));
    }
    free(vals);
    fputs("</svg>\n", f);
}

int sim_write_html(const char *path, const struct sim_trace *t,
                   const struct sim_run_result *results, size_t policies, size_t seeds,
                   struct vg_err *err)
{
    VG_AUTO_FILE FILE *f = fopen(path, "w");
    if (f == NULL)
        return vg_err_errno(err, errno, "%s: cannot create", path);
    fprintf(f,
            "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>vgpu-sim: %s"
            "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
            "collapse}td,th{border:1px solid #999;padding:4px 8px;text-align:right}"
            "</style></head><body>\n",
            t->workload);
    fprintf(f,
            "<h1>vgpu-sim: workload %s</h1>\n<p>%zu nodes, %llu GPUs, %zu pods in the "
            "list; %zu seeds per policy. Fill-up to 130 %% of GPU capacity, no departures "
            "(docs/placement.md). Lines: median over seeds; bands: 25&ndash;75 %%.</p>\n",
            t->workload, t->cluster->node_count, (unsigned long long)t->cluster->gpu_count,
            t->pod_count, seeds);
    fputs("<h2>At 100 % arrival</h2>\n<table><tr><th>policy</th><th>unallocated GPU % "
          "(mean)</th><th>SD</th><th>min</th><th>max</th><th>unallocated GPUs</th>"
          "<th>allocation % at 130 %</th><th>failed pods</th></tr>\n",
          f);
    double *v = xmalloc(seeds * sizeof *v);
    for (size_t p = 0; p < policies; p++) {
        const struct sim_run_result *runs = &results[p * seeds];
        struct sim_stats u, a, fl;
        for (size_t s = 0; s < seeds; s++)
            v[s] = runs[s].unallocated_pct_100;
        sim_stats(v, seeds, &u);
        for (size_t s = 0; s < seeds; s++)
            v[s] = runs[s].alloc_pct_130;
        sim_stats(v, seeds, &a);
        for (size_t s = 0; s < seeds; s++)
            v[s] = (double)runs[s].failed_pods;
        sim_stats(v, seeds, &fl);
        fprintf(f,
                "<tr><td style='text-align:left'>%s</td><td>%.2f</td><td>%.2f</td><td>%.2f"
                "</td><td>%.2f</td><td>%.0f</td><td>%.2f</td><td>%.0f</td></tr>\n",
                place_policy_name(runs[0].policy), u.mean, u.sd, u.min, u.max,
                u.mean * (double)t->cluster->gpu_count / 100.0, a.mean, fl.mean);
    }
    free(v);
    fputs("</table>\n", f);
    /* What "unallocated at 100 %" is made of: the requests rejected up to then. */
    fputs("<h2>Rejected pods up to 100 % arrival, by shape (mean per seed: pods / GPUs)</h2>\n"
          "<table><tr><th>policy</th>",
          f);
    for (int k = 0; k < SIM_SHAPE_COUNT; k++)
        fprintf(f, "<th>%s</th>", sim_shape_name((enum sim_shape)k));
    fputs("</tr>\n", f);
    for (size_t p = 0; p < policies; p++) {
        const struct sim_run_result *runs = &results[p * seeds];
        fprintf(f, "<tr><td style='text-align:left'>%s</td>", place_policy_name(runs[0].policy));
        for (int k = 0; k < SIM_SHAPE_COUNT; k++) {
            double pods = 0, gpus = 0;
            for (size_t s = 0; s < seeds; s++) {
                pods += (double)runs[s].failed_100[k];
                gpus += (double)runs[s].failed_100_milli[k] / PLACE_GPU_MILLI;
            }
            fprintf(f, "<td>%.1f / %.1f</td>", pods / (double)seeds, gpus / (double)seeds);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n<p>Shapes: cpu = no GPU; share = one fractional GPU; gpu1, gpu2 = one or "
          "two whole GPUs; gpu4 = 3&ndash;4; gpu8 = 5 or more.</p>\n",
          f);
    svg_chart(f, "GPU allocation vs arrival", "allocated GPU (% of capacity)", CURVE_ALLOC, 100,
              results, policies, seeds);
    svg_chart(f, "Fragmentation amount", "F(M) (% of cluster GPUs)", CURVE_FRAG, 40, results,
              policies, seeds);
    svg_chart(f, "Fragmentation rate", "F(M) / unallocated (%)", CURVE_RATE, 100, results, policies,
              seeds);
    fputs("</body></html>\n", f);
    bool failed = ferror(f) != 0;
    if (fclose(vg_steal_ptr(&f)) != 0 || failed)
        return vg_err_set(err, -EIO, "%s: write failed", path);
    return 0;
}
