/* Reading the echo policy out of a spec (see echo_policy.h). The spec's
 * grammar is the library's: stages split on '|', NAME[:OPTIONS], options
 * split on ',', key=value; '"' quotes a value holding either separator.
 * Only the policy is read: the library parses and checks the rest. */
#include "echo_policy.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* The next part of [*p, end) up to an unquoted `sep`: its bounds, trimmed;
 * *p moves past the separator. */
static void next_part(const char **p, const char *end, char sep,
                      const char **at, size_t *len)
{
    const char *s = *p;
    int quoted = 0;
    const char *e = s;
    while (e < end && (quoted || *e != sep)) {
        quoted ^= *e == '"';
        e++;
    }
    *p = e < end ? e + 1 : end;
    while (s < e && isspace((unsigned char)*s))
        s++;
    while (e > s && isspace((unsigned char)e[-1]))
        e--;
    *at = s;
    *len = (size_t)(e - s);
}

/* The policy among one stage's options [opts, end). */
static int policy_in(const char *opts, const char *end, char *name, size_t len)
{
    while (opts < end) {
        const char *opt;
        size_t n;
        next_part(&opts, end, ',', &opt, &n);
        const char *eq = memchr(opt, '=', n);
        if (!eq)
            continue; /* a bare first option: the factor */
        const char *key = opt, *value = eq + 1;
        size_t klen = (size_t)(eq - opt), vlen = n - klen - 1;
        while (klen && isspace((unsigned char)key[klen - 1]))
            klen--;
        while (vlen && isspace((unsigned char)*value))
            value++, vlen--;
        if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"')
            value++, vlen -= 2;
        if (klen != 6 || memcmp(key, "policy", 6) != 0 ||
            (vlen == 7 && memcmp(value, "uniform", 7) == 0))
            continue;
        snprintf(name, len, "%.*s", (int)vlen, value);
        return 1;
    }
    return 0;
}

int echo_policy_of_opts(const char *opts, char *name, size_t len)
{
    if (opts && policy_in(opts, opts + strlen(opts), name, len))
        return 1;
    snprintf(name, len, "uniform");
    return 0;
}

int echo_policy_of_spec(const char *spec, char *name, size_t len)
{
    const char *p = spec, *end = spec + strlen(spec);
    while (p < end) {
        const char *stage;
        size_t n;
        next_part(&p, end, '|', &stage, &n);
        const char *colon = memchr(stage, ':', n);
        size_t nlen = colon ? (size_t)(colon - stage) : n;
        while (nlen && isspace((unsigned char)stage[nlen - 1]))
            nlen--;
        if (colon && nlen == 4 && memcmp(stage, "echo", 4) == 0 &&
            policy_in(colon + 1, stage + n, name, len))
            return 1;
    }
    snprintf(name, len, "uniform");
    return 0;
}
