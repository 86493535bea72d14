/* config_man.c — writes qdpd.conf(5) from the option table (config.h), so the page lists every
 * option with its default, unit and environment name exactly as qdpd parses them. Run by the
 * build; prints the page (roff, man macros) on stdout. */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "qdp_build_config.h"

/* Text for roff: backslashes and hyphens escaped, a leading period or quote guarded. */
static void text(const char *s) {
  if (*s == '.' || *s == '\'') {
    fputs("\\&", stdout);
  }
  for (; *s; s++) {
    if (*s == '\\') {
      fputs("\\e", stdout);
    } else if (*s == '-') {
      fputs("\\-", stdout);
    } else {
      putchar(*s);
    }
  }
}

static void upper(const char *s) {
  for (; *s; s++) {
    putchar(*s >= 'a' && *s <= 'z' ? *s - 'a' + 'A' : *s);
  }
}

int main(void) {
  printf(".TH QDPD.CONF 5 \"\" \"qdp %s\" \"File Formats\"\n", QDP_VERSION);
  puts(".SH NAME\nqdpd.conf \\- configuration of qdpd, the qdp node daemon");
  puts(".SH SYNOPSIS\n.I /etc/qdp/qdpd.conf");
  puts(".SH DESCRIPTION\nOne\n.I name\n=\n.I value\nper line; blank lines and lines that start "
       "with\n.B #\nare ignored, whitespace around the name and the value and one pair of double "
       "quotes around the value are stripped. A name may spell\n.B _\nas\n.BR \\- .\n.PP\n"
       "Each option can also be given in the environment as\n.BI QDP_ NAME\nand on the command "
       "line as\n.BI \\-\\- name\n.IR value ;\nthe command line wins over the environment, which "
       "wins over the file, which wins over the default.\n.B qdpd \\-\\-print\\-config\nshows "
       "the values in effect and where each came from.\n.PP\nSizes take K, M, G, T (powers of "
       "1000) or Ki, Mi, Gi, Ti (powers of 1024); durations take s, m, h, d. SIGHUP re-reads "
       "the file and applies the options marked\n.IR runtime ;\nthe others take a restart.");
  puts(".SH OPTIONS");
  for (size_t i = 0; i < config_option_count(); i++) {
    const struct config_option *o = config_option_at(i);
    printf(".TP\n.BI \"");
    text(o->name);
    printf(" = \" ");
    text(o->unit);
    printf("\n");
    text(o->doc);
    printf(".\n.br\nDefault: ");
    if (o->def[0]) {
      printf("\\fB");
      text(o->def);
      printf("\\fR");
    } else {
      printf("empty");
    }
    printf(". Environment: \\fBQDP_");
    upper(o->name);
    printf("\\fR");
    if (o->env_alias) {
      printf(" or \\fB");
      text(o->env_alias);
      printf("\\fR");
    }
    printf(".%s\n", o->runtime ? " Runtime: SIGHUP applies a change." : "");
  }
  puts(".SH FILES\n.TP\n.I /etc/qdp/qdpd.conf\nthe default file (\n.B \\-\\-config\nnames "
       "another); the installed one lists every option, commented out, with its default.");
  puts(".SH SEE ALSO\n.BR qdpd (8),\n.BR qdpctl (1)");
  return 0;
}
