/* What the gpupart command's files share: exit codes, the option scanner, and the small
 * JSON and size printers. Each command lives in its own file (cmd_*.c). */
#ifndef GPUPART_TOOLS_CLI_H
#define GPUPART_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "gpupart.h"

enum { EXIT_OK = 0, EXIT_CHECKED = 1, EXIT_USAGE = 2 };

/* Scans argv[*i]: "--name", "--name VALUE" or "--name=VALUE". Returns 1 and sets *value
 * (NULL for a flag) when argv[*i] is that option, advancing *i past a separate value;
 * 0 when it is not; -1 when a value is missing (a message is printed). */
int cli_option(int argc, char **argv, int *i, const char *name, int takes_value, const char **value);
/* Prints "gpupart COMMAND: message" and a pointer to --help; returns EXIT_USAGE. */
int cli_usage_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "gpupart: message" with the library's last error; returns EXIT_CHECKED. */
int cli_failure(const char *what, gpupart_result rc);
/* Whether argv holds -h or --help. */
int cli_wants_help(int argc, char **argv);

/* Creates a context that reads the environment and the configuration file. */
gpupart_result cli_context(gpupart_context **out);
/* cli_context, and with warn the library's warnings printed on stderr as
 * "gpupart: warning: ..." (for the commands that open devices as a program would). */
gpupart_result cli_context_warning(gpupart_context **out, int warn);

/* The length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF), or 0. */
size_t cli_utf8_len(const unsigned char *p);
/* A JSON string, quoted and escaped. */
void json_string(FILE *f, const char *s);
/* s made safe for a terminal into out (n bytes): a control character (an escape
 * sequence's ESC, a newline) or a byte that is not part of valid UTF-8 becomes '?'. */
void cli_text(const char *s, char *out, size_t n);
/* The library's last error message made safe for a terminal (cli_text) into out: a
 * message may quote what a shared ledger's file says (a partition's name), any bytes. */
const char *cli_last_error(char *out, size_t n);
/* The characters (code points) of UTF-8 text s, as a terminal's columns. */
size_t cli_width(const char *s);
/* "16 GiB", "1.5 MiB", "512 B". */
void human_bytes(uint64_t bytes, char *buf, size_t n);

int cmd_devices(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_check_config(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_metrics(int argc, char **argv);
int cmd_exporter(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_cdi(int argc, char **argv);
int cmd_resize(int argc, char **argv);
int cmd_ledger(int argc, char **argv);

#endif
