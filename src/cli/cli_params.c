/* cli_params.c — options, checks and --help lines from the parameter table (cli_params.h). */
#include "cli/cli_params.h"
#include "cli/cli_common.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

void cli_param_options(struct option *opts, size_t *n, size_t cap, ssb4d_op op, const char *const *names)
{
    size_t rows;
    const ssb4d_param *t = ssb4d_params(op, &rows);
    for (const char *const *w = names; *w && *n + 1 < cap; w++)
        for (size_t i = 0; i < rows; i++)
            if (t[i].option && !strcmp(t[i].option, *w)) {
                int flag = t[i].type == SSB4D_PARAM_BOOL;
                opts[(*n)++] = (struct option){t[i].option, flag ? no_argument : required_argument, 0,
                                               CLI_OPT_PARAM + (int)op * 100 + (int)i};
            }
    opts[*n] = (struct option){0, 0, 0, 0};
}

const ssb4d_param *cli_param_row(int c)
{
    if (c < CLI_OPT_PARAM || c >= CLI_OPT_PARAM + SSB4D_OP_COUNT * 100)
        return NULL;
    size_t rows, i = (size_t)((c - CLI_OPT_PARAM) % 100);
    const ssb4d_param *t = ssb4d_params((ssb4d_op)((c - CLI_OPT_PARAM) / 100), &rows);
    return i < rows ? &t[i] : NULL;
}

int cli_param_handle(int c, const char *arg, void *const targets[SSB4D_OP_COUNT])
{
    const ssb4d_param *p = cli_param_row(c);
    if (!p || !targets[(c - CLI_OPT_PARAM) / 100])
        return 0;
    ssb4d_op op = (ssb4d_op)((c - CLI_OPT_PARAM) / 100);
    ssb4d_err err = {0};
    if (p->type == SSB4D_PARAM_BOOL) /* a flag: --no-… clears it, else it sets it */
        return ssb4d_param_parse(p, targets[op], p->flags & SSB4D_PARAM_NEGATED ? "0" : "1", &err) ? -1 : 1;
    if (ssb4d_param_parse(p, targets[op], arg, &err) == SSB4D_OK)
        return 1;
    double d;
    char what[160];
    if ((p->type == SSB4D_PARAM_DOUBLE && !p->choices && cli_parse_double(arg, &d)) ||
        (p->type == SSB4D_PARAM_PAIR && cli_parse_pair(arg, (double[2]){0, 0})))
        cli_say("invalid number '%s' for --%s (%s)", arg, p->option, ssb4d_param_describe(p, what, sizeof what));
    else
        cli_say("--%s must be %s; got '%s'", p->option, ssb4d_param_describe(p, what, sizeof what), arg);
    return -1;
}

/* What follows the option in its help line: "N", "band|loss", "NM", "ROW,COL". */
static void metavar(const ssb4d_param *p, char *buf, size_t n)
{
    if (p->type == SSB4D_PARAM_BOOL)
        buf[0] = 0;
    else if (p->choices)
        snprintf(buf, n, " %s%s", p->choices, p->flags & SSB4D_PARAM_AUTO ? "|auto" : "");
    else if (p->type == SSB4D_PARAM_PAIR)
        snprintf(buf, n, " ROW,COL");
    else if (p->type != SSB4D_PARAM_DOUBLE)
        snprintf(buf, n, " N");
    else {
        size_t k = 0;
        buf[k++] = ' ';
        for (const char *u = *p->unit ? p->unit : "F"; *u && k + 1 < n; u++)
            buf[k++] = (char)toupper((unsigned char)*u);
        buf[k] = 0;
    }
}

/* "64", "band", or "" when the default is unset or a flag's. */
static void default_text(const ssb4d_param *p, char *buf, size_t n)
{
    char w[64];
    buf[0] = 0;
    if (isnan(p->def) || p->type == SSB4D_PARAM_BOOL)
        return;
    if (p->type == SSB4D_PARAM_ENUM) {
        const char *s = p->choices;
        for (int i = 0; s && i < (int)p->def; i++)
            s = strchr(s, '|') ? strchr(s, '|') + 1 : NULL;
        snprintf(w, sizeof w, "%.*s", s ? (int)strcspn(s, "|") : 0, s ? s : "");
    } else if (p->def == 0 && (p->flags & SSB4D_PARAM_AUTO))
        snprintf(w, sizeof w, "auto"); /* 0 stands for "auto" */
    else
        snprintf(w, sizeof w, "%g", p->def);
    snprintf(buf, n, "%s", w);
}

#define HELP_COL 24
#define HELP_WIDTH 88

void cli_param_help(FILE *f, ssb4d_op op, const char *const *names, int with_defaults)
{
    for (const char *const *w = names; *w; w++) {
        const ssb4d_param *p = ssb4d_param_find(op, *w);
        if (!p || !p->option)
            continue;
        char head[96], text[1024], dflt[96], mv[64];
        metavar(p, mv, sizeof mv);
        default_text(p, dflt, sizeof dflt);
        if (!with_defaults)
            dflt[0] = 0;
        int k = snprintf(head, sizeof head, "  --%s%s", p->option, mv);
        /* the default where the help places it ("{default}"), else after it */
        const char *at = strstr(p->help, "{default}");
        if (at)
            snprintf(text, sizeof text, "%.*s%s%s", (int)(at - p->help), p->help, dflt, at + 9);
        else
            snprintf(text, sizeof text, "%s%s%s%s%s", p->flags & SSB4D_PARAM_NEGATED ? "skip " : "", p->help,
                     *dflt ? " (default " : "", dflt, *dflt ? ")" : "");
        /* the option, then the help wrapped at HELP_WIDTH from column HELP_COL */
        if (k + 1 > HELP_COL)
            fprintf(f, "%s\n%*s", head, HELP_COL, "");
        else
            fprintf(f, "%-*s", HELP_COL, head);
        const char *s = text;
        while (*s) {
            size_t room = HELP_WIDTH - HELP_COL, len = strlen(s);
            if (len > room) {
                len = room;
                while (len > 0 && s[len] != ' ')
                    len--;
                if (!len)
                    len = room;
            }
            fprintf(f, "%.*s\n", (int)len, s);
            s += len;
            while (*s == ' ')
                s++;
            if (*s)
                fprintf(f, "%*s", HELP_COL, "");
        }
    }
}
