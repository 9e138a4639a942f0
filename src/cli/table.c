/* Aligned tables in kubectl's layout (cli.h). */
#include <string.h>

#include "base/mem.h"
#include "cli/cli.h"

void cli_sanitize(char *dst, size_t size, const char *s)
{
    if (size == 0)
        return;
    size_t n = 0;
    const char *p = s != NULL ? s : "";
    for (; *p && n + 1 < size; p++)
        dst[n++] = ((unsigned char)*p < 0x20 || *p == 0x7f) ? '?' : *p;
    dst[n] = '\0';
    if (*p && size >= 4) /* cut: say so */
        memcpy(dst + size - 4, "...", 4);
}

void cli_table_init(struct cli_table *t, size_t cols)
{
    memset(t, 0, sizeof *t);
    t->cols = cols < CLI_COLS_MAX ? cols : CLI_COLS_MAX;
}

static char *cell(const struct cli_table *t, size_t row, size_t col)
{
    return t->cells + (row * t->cols + col) * CLI_CELL_MAX;
}

void cli_table_reserve(struct cli_table *t, size_t rows)
{
    xarray_grow(&t->cells, &t->cap, t->rows + rows, t->cols * CLI_CELL_MAX);
}

void cli_table_add(struct cli_table *t, const char *const *cells)
{
    cli_table_reserve(t, 1);
    for (size_t c = 0; c < t->cols; c++) {
        char *dst = cell(t, t->rows, c);
        cli_sanitize(dst, CLI_CELL_MAX, cells[c]);
        size_t w = strlen(dst);
        if (w > t->width[c])
            t->width[c] = w;
    }
    t->rows++;
}

void cli_table_add_tabbed(struct cli_table *t, const char *tabbed)
{
    const char *cells[CLI_COLS_MAX] = {0};
    char copy[CLI_COLS_MAX * CLI_CELL_MAX];
    size_t n = strlen(tabbed);
    if (n >= sizeof copy)
        n = sizeof copy - 1;
    memcpy(copy, tabbed, n);
    copy[n] = '\0';
    char *p = copy;
    for (size_t c = 0; c < t->cols && p != NULL; c++) {
        cells[c] = p;
        p = strchr(p, '\t');
        if (p != NULL)
            *p++ = '\0';
    }
    cli_table_add(t, cells);
}

void cli_table_print(const struct cli_table *t, FILE *f, size_t max_width)
{
    char line[CLI_COLS_MAX * (CLI_CELL_MAX + 3) + 1];
    for (size_t r = 0; r < t->rows; r++) {
        size_t n = 0;
        for (size_t c = 0; c < t->cols; c++) {
            const char *s = cell(t, r, c);
            size_t len = strlen(s);
            memcpy(line + n, s, len);
            n += len;
            if (c + 1 < t->cols) {
                size_t pad = t->width[c] - len + 3;
                memset(line + n, ' ', pad);
                n += pad;
            }
        }
        while (n > 0 && line[n - 1] == ' ')
            n--;
        if (max_width > 0 && n > max_width)
            n = max_width;
        line[n] = '\0';
        fputs(line, f);
        fputc('\n', f);
    }
}

void cli_table_free(struct cli_table *t)
{
    free(t->cells);
    memset(t, 0, sizeof *t);
}
