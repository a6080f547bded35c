/* The exporter's status page (page.h). Each partition is a bar scaled to its device's
 * budget: the light track is its limit, the middle fill what it reserved from the driver,
 * the dark fill within it the bytes in its live allocations (all its members), a line
 * marks its guarantee. It reloads itself with a meta refresh: no script runs. */
#include <string.h>
#include <time.h>

#include "cli.h"
#include "page.h"

static const char head[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<meta http-equiv=\"refresh\" content=\"%d\">\n<title>gpupart</title>\n<style>\n"
    "body{font:14px sans-serif;margin:1.5em;color:#222}\n"
    "h2{font-size:1.1em;margin:1.5em 0 .3em}\n"
    "table{border-collapse:collapse}td,th{padding:.15em .6em;text-align:right}\n"
    "td.n,th.n{text-align:left}\n"
    ".track{position:relative;width:24em;height:1em;background:#eee}\n"
    ".limit{position:absolute;top:0;left:0;height:100%%;background:#c9d7ee}\n"
    ".reserved{position:absolute;top:0;left:0;height:100%%;background:#729fcf}\n"
    ".in_use{position:absolute;top:0;left:0;height:100%%;background:#204a87}\n"
    ".guarantee{position:absolute;top:-2px;width:2px;height:calc(100%% + 4px);background:#cc0000}\n"
    ".bad{color:#a40000}\n"
    "</style></head><body>\n<h1>gpupart</h1>\n";

/* s with &, <, >, " and ' as entities; a control character (but tab and newline) or a
 * byte that is not part of valid UTF-8 becomes U+FFFD, so the page is valid UTF-8 HTML. */
static void html(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    const char *e = *p == '&'    ? "&amp;"
                    : *p == '<'  ? "&lt;"
                    : *p == '>'  ? "&gt;"
                    : *p == '"'  ? "&quot;"
                    : *p == '\'' ? "&#39;"
                                 : NULL;
    size_t n = *p >= 0x80 ? cli_utf8_len(p) : (*p >= 0x20 && *p != 0x7f) || *p == '\t' || *p == '\n';
    if (e) fputs(e, f);
    else if (!n) fputs("\xef\xbf\xbd", f);
    else fwrite(p, 1, n, f), p += n - 1;
  }
}

static double share(uint64_t part, uint64_t whole) {
  double s = whole ? 100.0 * (double)part / (double)whole : 0;
  return s > 100 ? 100 : s;
}

static void bytes_cell(FILE *f, uint64_t v) {
  char b[32];
  human_bytes(v, b, sizeof b);
  fprintf(f, "<td>%s</td>", b);
}

static void partition_row(FILE *f, const gpupart__ledger_snapshot *s, const gpupart__ledger_snapshot_entry *e) {
  const gpupart__ledger_figures *g = &e->figures;
  fputs("<tr><td class=\"n\">", f);
  html(f, e->name);
  fprintf(f,
          "</td><td class=\"n\"><div class=\"track\" title=\"in use / reserved / limit; the line is the guarantee\">"
          "<div class=\"limit\" style=\"width:%.2f%%\"></div><div class=\"reserved\" style=\"width:%.2f%%\"></div>"
          "<div class=\"in_use\" style=\"width:%.2f%%\"></div>",
          share(g->limit, s->budget), share(g->reserved, s->budget), share(e->in_use, s->budget));
  if (g->guarantee) fprintf(f, "<div class=\"guarantee\" style=\"left:%.2f%%\"></div>", share(g->guarantee, s->budget));
  fputs("</div></td>", f);
  bytes_cell(f, e->in_use), bytes_cell(f, g->reserved), bytes_cell(f, g->limit), bytes_cell(f, g->guarantee),
      bytes_cell(f, g->peak_reserved);
  fprintf(f, "<td>%lld</td></tr>\n", (long long)e->pid);
}

static void device_section(FILE *f, const observed_device *d) {
  const gpupart__ledger_snapshot *s = d->s;
  char b[32], r[32];
  fputs("<h2>", f);
  html(f, *s->identity ? s->identity : s->file);
  if (*d->backend) fprintf(f, " (%s %lld)", d->backend, (long long)d->index);
  fputs("</h2>\n", f);
  if (s->status) {
    fprintf(f, "<p class=\"bad\">%s: ", observe_status(s));
    html(f, s->why);
    fputs("</p>\n", f);
    return;
  }
  human_bytes(s->budget, b, sizeof b), human_bytes(s->reserved, r, sizeof r);
  fprintf(f, "<p>budget %s, reserved %s, %u member%s%s</p>\n", b, r, s->members, s->members == 1 ? "" : "s",
          s->consistent ? "" : " <span class=\"bad\">(inconsistent)</span>");
  fputs("<table><tr><th class=\"n\">partition</th><th class=\"n\">in use / reserved / limit</th><th>in "
        "use</th><th>reserved</th>"
        "<th>limit</th><th>guarantee</th><th>peak</th><th>pid</th></tr>\n",
        f);
  for (uint32_t i = 0; i < s->entries; i++) partition_row(f, s, &s->entry[i]);
  fputs("</table>\n", f);
}

void page_html(FILE *f, const observation *o) {
  char when[32];
  time_t t = (time_t)o->time;
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
  fprintf(f, head, PAGE_REFRESH_SECONDS);
  fprintf(f, "<p>%s, %u shared device%s in ", when, o->n, o->n == 1 ? "" : "s");
  html(f, o->dir);
  fputs(". <a href=\"/metrics\">metrics</a></p>\n", f);
  for (uint32_t i = 0; i < o->n; i++) device_section(f, &o->dev[i]);
  fputs("</body></html>\n", f);
}
